"""PySpark (pyproject.toml) and Spark's Kafka connector (compat_tests/java/spark/pom.xml) are
one Spark version: a connector built for another Spark fails at run time with
NoSuchMethodError/ClassNotFoundException, not at install. The README's recipes name it too."""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pyspark_pin() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [d for group in project.get("optional-dependencies", {}).values() for d in group]
    pins += project.get("dependencies", [])
    found = {m.group(1) for d in pins if (m := re.fullmatch(r"pyspark==([\w.]+)", d.replace(" ", "")))}
    assert len(found) == 1, f"one exact pyspark pin expected in pyproject.toml, found {pins}"
    return found.pop()


def _connector_pin() -> str:
    root = ET.parse(ROOT / "compat_tests" / "java" / "spark" / "pom.xml").getroot()
    version = root.find("m:properties/m:spark.version", POM_NS)
    assert version is not None and version.text
    return version.text.strip()


def test_pyspark_and_the_kafka_connector_are_the_same_spark() -> None:
    assert _pyspark_pin() == _connector_pin()


def test_the_readme_names_the_pinned_version() -> None:
    readme = (ROOT / "README.md").read_text()
    version = _connector_pin()
    assert f"**PySpark {version}**" in readme
    assert f"**spark-sql-kafka-0-10_2.13 {version}**" in readme
    named = set(re.findall(r"spark-sql-kafka-0-10_2\.13:([\d.]+)", readme))
    assert named <= {version}, named


def test_newest_resolvable_spark_is_pinned() -> None:
    # 4.2.0: the newest Spark whose connector and token-provider jars both resolve from Maven
    # Central (issue 13); 4.0.0 was the previous pin.
    assert _connector_pin() == "4.2.0"
