"""A SparkSession with Spark's Kafka connector on its classpath, from local jars only.

`scripts/install_java.sh` resolves spark-sql-kafka-0-10 and the jars it needs (pinned in
`compat_tests/java/spark/pom.xml`) into `compat_tests/java/spark-lib/`.  A session started
from Python here gets exactly those files as `spark.jars`; it never uses
`spark.jars.packages`, so nothing is fetched when a job runs.

Under `spark-submit` (PySpark then finds `PYSPARK_GATEWAY_PORT` set) the session takes the
master and the jars from spark-submit's own flags (`--master`, `--jars` or `--packages`)
and this module adds nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
# Override with TMQGATE_SPARK_JARS_DIR (e.g. where a deployment keeps the same jars).
DEFAULT_JARS_DIR = REPO_ROOT / "compat_tests" / "java" / "spark-lib"

# Small and quick, for a laptop, CI or a 2-core box; a cluster's spark-submit overrides them.
LOCAL_CONF: dict[str, str] = {
    "spark.driver.memory": "768m",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    # Stateful streaming: HDFS-backed state store is the default; keep few versions around.
    "spark.sql.streaming.minBatchesToRetain": "10",
    # Small heaps start faster with the serial collector.
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def jars_dir() -> Path:
    return Path(os.environ.get("TMQGATE_SPARK_JARS_DIR") or DEFAULT_JARS_DIR)


def connector_jars(directory: Path | None = None) -> list[Path]:
    """The connector's jars, or an error saying how to install them."""
    d = directory or jars_dir()
    jars = sorted(d.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10_") for j in jars):
        raise FileNotFoundError(
            f"no spark-sql-kafka-0-10 jar in {d}: run scripts/install_java.sh "
            "(or set TMQGATE_SPARK_JARS_DIR to a folder holding the connector's jars)")
    return jars


def under_spark_submit() -> bool:
    """True when spark-submit started this Python driver (it then owns master and jars)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(app_name: str, master: str | None = None,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession that can read and write Kafka topics.

    Outside spark-submit: master `master` (default local[2]), the connector's jars from
    `jars_dir()` and LOCAL_CONF, then `conf` on top.  Under spark-submit: only `conf`
    (and `master` if given explicitly).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if under_spark_submit():
        if master:
            builder = builder.master(master)
    else:
        # the JVM reads it at launch; without it Spark binds to the first non-loopback address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master or "local[2]")
        builder = builder.config("spark.jars", ",".join(str(j) for j in connector_jars()))
        for k, v in LOCAL_CONF.items():
            builder = builder.config(k, v)
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TMQGATE_SPARK_LOG_LEVEL", "WARN"))
    return spark
