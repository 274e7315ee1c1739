"""The container targets of the compatibility suite (compat_tests/containers.py, issue 13).

Where no Docker engine is reachable, `--target kafka-container` / `tmqgate-container` skip
every test with one line naming the reason — no traceback, no error, exit status 0. Where one
is, the broker gets the same settings as the process-based fixtures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compat_tests.containers import KAFKA_IMAGE, kafka_environment, tmqgate_environment
from compat_tests.kafka_ref import SINGLE_NODE_CONFIG
from tmqgate.broker.config import BrokerConfig

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("target", ["kafka-container", "tmqgate-container"])
def test_without_docker_the_suite_skips_with_one_line(target: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}  # no engine, whatever this machine has
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "compat_tests/test_api_versions.py", "--target", target],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "error" not in out.lower()
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert len(skipped) == 1, out  # one reason, for every test
    assert re.fullmatch(rf"SKIPPED \[\d+\] .*: --target {target}: no Docker engine reachable at "
                        rf"unix://{tmp_path}/no-docker.sock", skipped[0]), skipped
    assert re.search(r"\d+ skipped", out) and " passed" not in out and "failed" not in out


def test_kafka_container_gets_the_reference_brokers_settings() -> None:
    assert KAFKA_IMAGE == "apache/kafka:4.3.1"  # the jar-based reference broker's version
    env = kafka_environment(19092, {"auto.create.topics.enable": "false"})
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:19092"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    for key, value in SINGLE_NODE_CONFIG.items():
        assert env["KAFKA_" + key.upper().replace(".", "_")] == value
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_tmqgate_container_env_is_read_by_the_broker_config() -> None:
    """The image's settings come from TMQGATE_* variables: what the fixture sets is what the
    broker in the container runs with (the image's config file beneath it)."""
    env = tmqgate_environment(19092, 16041, {"num_partitions": 3, "authorizer": "acl",
                                             "super_users": ["User:admin"]})
    config = BrokerConfig.load(ROOT / "deploy" / "tmqgate.toml", environ=env)
    assert (config.listen, config.advertised_listener) == ("0.0.0.0:19092", "localhost:19092")
    assert (config.num_partitions, config.authorizer, config.super_users) == (3, "acl", ["User:admin"])
    assert config.group_initial_rebalance_delay_ms == 0  # as the process fixture's TEST_DEFAULTS
