"""deploy/: no shipped file publishes the HTTP SQL front without authentication (issue 12).

The front runs any SQL for whoever reaches it unless `http_auth` is on; the container image,
the compose files and the systemd unit either bind it to loopback or run a config that has
`http_auth = "basic"` (deploy/secure/).

Issue 13: the image starts from the config file it ships (or one mounted over it) and
TMQGATE_* variables, and tells clients the configured address; compose adds Prometheus (scraping
/metrics), Grafana (deploy/grafana/ provisioned) and a Spark job reading a query topic; the
systemd unit says its prerequisites and does not restart on a configuration error (exit 2)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import yaml

from compat_tests.helpers import free_port, require
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.values import parse_hostport
from tmqgate.broker.network.listeners import advertised_addresses, parse_listeners

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _http_of(args: list[str]) -> str | None:
    return args[args.index("--http") + 1] if "--http" in args else None


def _config_of(args: list[str], mounts: dict[str, Path]) -> dict[str, object]:
    if "--config" not in args:
        return {}
    return tomllib.loads(mounts[args[args.index("--config") + 1]].read_text())


def _auth_of(args: list[str], config: dict[str, object]) -> object:
    return args[args.index("--http-auth") + 1] if "--http-auth" in args else config.get("http_auth")


def _front_is_safe(args: list[str], mounts: dict[str, Path]) -> bool:
    config = _config_of(args, mounts)
    http = _http_of(args) or str(config.get("http", "127.0.0.1:6041"))
    return parse_hostport(http)[0] in LOOPBACK or _auth_of(args, config) == "basic"


def test_container_image_publishes_the_sql_front_only_with_authentication() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    image_files = {"/etc/tmqgate/tmqgate.toml": DEPLOY / "tmqgate.toml"}  # COPY'd into the image
    assert _front_is_safe(cmd, image_files)
    if re.search(r"^EXPOSE .*\b6041\b", text, re.M):
        assert _auth_of(cmd, _config_of(cmd, image_files)) == "basic"


def test_compose_files_publish_the_front_only_with_authentication() -> None:
    for path in (DEPLOY / "compose.yaml", DEPLOY / "secure" / "compose.yaml"):
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            mounts = {}
            for volume in service.get("volumes", []):
                source, _, target = volume.partition(":")
                if source.startswith("."):
                    mounts[target.rsplit(":", 1)[0] if target.endswith((":ro", ":rw")) else target] = \
                        path.parent / source
            if "command" not in service or service["command"][:2] != ["tmqgate", "serve"]:
                continue  # the init, setup and Spark services run no broker
            env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
            if env.get("TMQGATE_HTTP_AUTH") == '"basic"':
                assert "6041" not in " ".join(str(p) for p in service.get("ports", [])), (path, name)
                continue  # on the compose network with HTTP Basic, and not published
            assert _front_is_safe(service["command"], mounts), (path, name)
            published = [str(p) for p in service.get("ports", [])]
            if any(p.endswith(":6041") for p in published):
                assert _auth_of(service["command"], _config_of(service["command"], mounts)) == "basic", (path, name)


def test_systemd_unit_keeps_the_front_on_loopback() -> None:
    line = next(ln for ln in (DEPLOY / "tmqgate.service").read_text().splitlines() if ln.startswith("ExecStart="))
    assert _front_is_safe(line.split(), {"/etc/tmqgate/tmqgate.toml": DEPLOY / "tmqgate.toml"})


# --- issue 13: settings from the mounted file or TMQGATE_* variables, advertised as told -------

def _dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def _image_cmd() -> list[str]:
    return json.loads(re.search(r"^CMD (\[.*\])$", _dockerfile(), re.M).group(1))


def _image_env() -> dict[str, str]:
    return dict(re.findall(r"^ENV (\w+)=(\S+)$", _dockerfile(), re.M))


def _compose_service(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"][name]


def _start(args: list[str], env: dict[str, str], workdir: Path) -> tuple[subprocess.Popen, str]:
    """`tmqgate <args>` started as the console script would be; its ready line (or the log, failed)."""
    log = workdir / "broker.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tmqgate.broker.cli", *args], cwd=workdir,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    while True:
        ready = [ln for ln in log.read_text().splitlines() if ln.startswith("tmqgate ready")]
        if ready:
            return proc, ready[0]
        if proc.poll() is not None:
            raise AssertionError(f"the broker did not start: {log.read_text()}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)


def test_image_starts_from_the_config_file_it_ships() -> None:
    """The CMD reads /etc/tmqgate/tmqgate.toml, which the image copies from deploy/tmqgate.toml
    (mount another file there to replace it) and sets nothing itself that the file should say."""
    cmd = _image_cmd()
    assert cmd[:2] == ["tmqgate", "serve"]
    assert cmd[cmd.index("--config") + 1] == "/etc/tmqgate/tmqgate.toml"
    assert re.search(r"^COPY deploy/tmqgate\.toml /etc/tmqgate/tmqgate\.toml$", _dockerfile(), re.M)
    assert not {"--listen", "--http", "--http-auth"} & set(cmd)  # flags would override file and env
    assert "6041" not in re.search(r"^EXPOSE (.*)$", _dockerfile(), re.M).group(1)


def test_image_config_advertises_localhost_at_the_bound_port_not_the_hostname() -> None:
    """The image tells clients localhost (its ENV TMQGATE_ADVERTISED_LISTENER, a host without a
    port) with the port it is bound to, never the container's hostname; the shipped file itself
    advertises nothing (the bound address: issue 24, a --listen port change once told clients
    the file's localhost:9092)."""
    assert "advertised_listener" not in tomllib.loads((DEPLOY / "tmqgate.toml").read_text())
    config = BrokerConfig.load(DEPLOY / "tmqgate.toml", environ=_image_env())
    assert config.data_dir == "/data" and config.http == "127.0.0.1:6041"
    for port in (9092, 19092):
        bound = {listener.name: ("0.0.0.0", port) for listener in parse_listeners(config)}
        assert advertised_addresses(config, bound) == {"PLAINTEXT": ("localhost", port)}
    bound = {"PLAINTEXT": ("0.0.0.0", 9092)}
    told = BrokerConfig.load(DEPLOY / "tmqgate.toml",
                             environ={**_image_env(), "TMQGATE_ADVERTISED_LISTENER": "kafka.example.com:9092"})
    assert advertised_addresses(told, bound) == {"PLAINTEXT": ("kafka.example.com", 9092)}


def test_image_cmd_runs_and_tells_clients_the_configured_address(tmp_path: Path) -> None:
    """The image's CMD, run here with its ENV (data dir and ports moved into tmp_path): Metadata
    names localhost at the bound port, or TMQGATE_ADVERTISED_LISTENER's address, never the
    machine's hostname; the SQL front is on loopback."""
    from compat_tests.raw import RawConn

    for told in (None, "broker.example.com:19092"):
        kafka, http = free_port(), free_port()
        expected = ("localhost", kafka) if told is None else ("broker.example.com", 19092)
        env = {**_image_env(), "TMQGATE_DATA_DIR": str(tmp_path / "data"),
               "TMQGATE_LISTEN": f"127.0.0.1:{kafka}", "TMQGATE_HTTP": f"127.0.0.1:{http}"}
        if told:
            env["TMQGATE_ADVERTISED_LISTENER"] = told
        cmd = _image_cmd()
        cmd[cmd.index("--config") + 1] = str(DEPLOY / "tmqgate.toml")
        proc, ready = _start(cmd[1:], env, tmp_path)
        try:
            assert f"kafka PLAINTEXT://{expected[0]}:{expected[1]}, http 127.0.0.1:{http}" in ready
            with RawConn(f"127.0.0.1:{kafka}") as conn:
                brokers = conn.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
            assert [(b["host"], b["port"]) for b in brokers] == [expected]
        finally:
            _stop(proc)


def test_compose_configures_tmqgate_from_the_mounted_file_and_env() -> None:
    service = _compose_service("tmqgate")
    mounts = {v.split(":")[1]: DEPLOY / v.split(":")[0] for v in service["volumes"] if v.startswith(".")}
    command = service["command"]
    config_path = mounts[command[command.index("--config") + 1]]
    env = {k: v.replace("${TMQGATE_HOST:-localhost}", "localhost") for k, v in service["environment"].items()}
    config = BrokerConfig.load(config_path, environ=env)
    bound = {listener.name: ("0.0.0.0", listener.port) for listener in parse_listeners(config)}
    # the host's clients and the compose network's (the Spark job, tmqgate:19092) each get an
    # address they can reach
    assert advertised_addresses(config, bound) == {"PLAINTEXT": ("localhost", 9092),
                                                   "INTERNAL": ("tmqgate", 19092)}
    spark = _compose_service("spark-job")
    assert spark["command"][spark["command"].index("--bootstrap") + 1] == "tmqgate:19092"
    # the SQL front: on the compose network for Prometheus and the setup job, with HTTP Basic,
    # not published on the host
    assert config.http == "0.0.0.0:6041" and config.http_auth == "basic"
    assert "tmqgate" in config.http_allowed_hosts
    assert not any(str(p).endswith("6041") for p in service["ports"])
    assert [str(p) for p in service["ports"]] == ["9092:9092"]


def test_compose_has_prometheus_scraping_metrics_and_grafana_provisioned() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    prometheus = services["prometheus"]
    mount = next(v for v in prometheus["volumes"] if v.endswith("/etc/prometheus/prometheus.yml:ro"))
    scrape = yaml.safe_load((DEPLOY / mount.split(":")[0]).read_text())["scrape_configs"]
    assert [(s["metrics_path"], s["static_configs"][0]["targets"]) for s in scrape] == \
        [("/metrics", ["tmqgate:6041"])]
    grafana = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert grafana["/var/lib/grafana/dashboards"] == "./grafana"  # the dashboard JSON of deploy/grafana/
    provisioning = DEPLOY / grafana["/etc/grafana/provisioning"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert [(d["type"], d["url"]) for d in sources] == [("prometheus", "http://prometheus:9090")]
    providers = yaml.safe_load((provisioning / "dashboards" / "tmqgate.yaml").read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards"]
    for name in ("prometheus", "grafana"):  # consoles on the host's loopback only
        assert all(str(p).startswith("127.0.0.1:") for p in services[name]["ports"]), name


def test_compose_spark_job_reads_the_query_topic_the_setup_creates() -> None:
    setup = (DEPLOY / "spark" / "setup.sql").read_text()
    assert re.search(r"CREATE TOPIC IF NOT EXISTS hot AS SELECT .* FROM power\.meters", setup)
    spark = _compose_service("spark-job")
    assert spark["command"][spark["command"].index("--topic") + 1] == "hot"
    assert spark["depends_on"] == {"setup": {"condition": "service_completed_successfully"}}
    job = (DEPLOY / "spark" / "query_topic.py").read_text()
    assert '.format("kafka")' in job and "spark.jars.packages" not in job
    dockerfile = (DEPLOY / "spark" / "Dockerfile").read_text()
    pom = (DEPLOY.parent / "compat_tests" / "java" / "spark" / "pom.xml").read_text()
    spark_version = re.search(r"<spark.version>([\d.]+)</spark.version>", pom).group(1)
    assert re.findall(r"pyspark==([\d.]+)", dockerfile) == [spark_version]
    assert "compat_tests/java/spark/install.sh" in dockerfile  # the connector at the tests' pins


def test_compose_setup_sql_runs_twice_on_a_real_broker(tmp_path: Path) -> None:
    """deploy/spark/setup.sql, as the compose setup service runs it on each `up` (so twice)."""
    kafka, http = free_port(), free_port()
    env = {"TMQGATE_DATA_DIR": str(tmp_path / "data")}
    proc, _ = _start(["serve", "--listen", f"127.0.0.1:{kafka}", "--http", f"127.0.0.1:{http}"], env, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        sql = (DEPLOY / "spark" / "setup.sql").read_text()
        for _ in range(2):
            done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "sql", "--http", f"127.0.0.1:{http}",
                                   sql], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        shown = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "sql", "--http", f"127.0.0.1:{http}",
                                "--json", "SHOW TOPICS"], env=env, capture_output=True, text=True, timeout=120)
        assert [row[0] for row in json.loads(shown.stdout)["data"]] == ["hot"]
        # the topic the Spark job reads: both runs' rows (two a run, voltage > 220), as JSON
        from compat_tests.raw import RawConn, fetched_values

        with RawConn(f"127.0.0.1:{kafka}") as conn:
            values = [json.loads(v) for p in (0, 1) for _, v in fetched_values(conn.fetch("hot", p, 0))]
        assert sorted((v["location"], v["voltage"]) for v in values) == [
            ("California.SanFrancisco", 221), ("California.SanFrancisco", 221),
            ("California.SanJose", 230), ("California.SanJose", 230)]
    finally:
        _stop(proc)


# --- the systemd unit ---------------------------------------------------------------------------

def _unit() -> str:
    return (DEPLOY / "tmqgate.service").read_text()


def test_systemd_unit_does_not_restart_on_a_configuration_error() -> None:
    """A missing or bad config exits 2 (one line naming the fix): restarting cannot help, so the
    unit stops instead of restart-looping."""
    keys = dict(ln.split("=", 1) for ln in _unit().splitlines() if "=" in ln and not ln.startswith("#"))
    assert keys["Restart"] == "on-failure"
    assert keys["RestartPreventExitStatus"] == "2"
    assert keys["User"] == "tmqgate"
    assert "--config /etc/tmqgate/tmqgate.toml" in keys["ExecStart"]


def test_systemd_unit_documents_its_prerequisites() -> None:
    head = "\n".join(ln for ln in _unit().splitlines() if ln.startswith("#"))
    assert "useradd --system" in head and "tmqgate" in head            # the User=
    assert "/etc/tmqgate/tmqgate.toml" in head                          # the config file
    assert "pip install" in head and "daemon-reload" in head


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing wrong (ExecStart pointed at an executable that exists
    here, since tmqgate is not installed at /usr/local/bin on a test machine)."""
    unit = tmp_path / "tmqgate.service"
    unit.write_text(_unit().replace("/usr/local/bin/tmqgate", shutil.which("true") or "/bin/true"))
    require(shutil.which("systemd-analyze"), "systemd-analyze not installed", "apt-get install systemd")
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
