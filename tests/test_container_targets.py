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
from tmqgate.broker.configs.config import BrokerConfig

ROOT = Path(__file__).resolve().parent.parent


def _run_without_docker(target: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """compat_tests/test_api_versions.py with `--target target` where no engine answers, whatever
    this machine has; outside CI unless `env` says otherwise."""
    clean = {k: v for k, v in os.environ.items() if k not in ("TMQGATE_CI", "CI")}
    env = {**clean, "PYTHONPATH": os.pathsep.join(sys.path), "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
           **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "compat_tests/test_api_versions.py", "--target", target],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("target", ["kafka-container", "tmqgate-container"])
def test_without_docker_the_suite_skips_with_one_line(target: str, tmp_path: Path) -> None:
    done = _run_without_docker(target, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "error" not in out.lower()
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert len(skipped) == 1, out  # one reason, for every test
    assert re.fullmatch(rf"SKIPPED \[\d+\] .*: --target {target}: no Docker engine reachable at "
                        rf"unix://{tmp_path}/no-docker.sock", skipped[0]), skipped
    assert re.search(r"\d+ skipped", out) and " passed" not in out and "failed" not in out


def test_under_ci_without_docker_the_tmqgate_container_target_fails_with_one_line(tmp_path: Path) -> None:
    """CI installs Docker and builds the image (scripts/install_docker.sh): there a missing
    engine fails the run, never passes as a run of skips."""
    done = _run_without_docker("tmqgate-container", tmp_path, TMQGATE_CI="1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(rf"--target tmqgate-container: no Docker engine reachable at unix://{tmp_path}/no-docker.sock; "
                     r"run scripts/install_docker.sh \(under CI a missing dependency fails the run\)", out), out
    assert "Traceback" not in out and " passed" not in out and "skipped" not in out


def test_under_ci_the_kafka_container_target_still_skips(tmp_path: Path) -> None:
    """apache/kafka's image comes from a registry: CI does not run --target kafka-container."""
    done = _run_without_docker("kafka-container", tmp_path, CI="true")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"\d+ skipped", out) and " passed" not in out and "failed" not in out


def test_kafka_container_gets_the_reference_brokers_settings() -> None:
    assert KAFKA_IMAGE == "apache/kafka:4.3.1"  # the jar-based reference broker's version
    env = kafka_environment(19092, {"auto.create.topics.enable": "false"})
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:19092"  # as the process target's
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
    assert (config.listen, config.advertised_listener) == ("0.0.0.0:19092", "127.0.0.1:19092")
    assert (config.num_partitions, config.authorizer, config.super_users) == (3, "acl", ["User:admin"])
    assert config.group_initial_rebalance_delay_ms == 0  # as the process fixture's TEST_DEFAULTS


@pytest.mark.container
def test_kafka_container_without_its_image_skips_with_one_line() -> None:
    """A Docker engine but no registry (this project's machines): apache/kafka cannot be pulled,
    and the whole run says so in one line."""
    from compat_tests.containers import kafka_image_unavailable, require_docker

    require_docker()
    if kafka_image_unavailable() is None:
        pytest.skip(f"{KAFKA_IMAGE} can be had here: nothing to check")
    clean = {k: v for k, v in os.environ.items() if k not in ("TMQGATE_CI", "CI")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "compat_tests/test_api_versions.py", "--target", "kafka-container"],
                          cwd=ROOT, env={**clean, "PYTHONPATH": os.pathsep.join(sys.path)},
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert len(skipped) == 1, out
    assert re.fullmatch(rf"SKIPPED \[\d+\] .*: --target kafka-container: the image {KAFKA_IMAGE} is not here and "
                        r"cannot be pulled \(.+\)", skipped[0]), skipped
