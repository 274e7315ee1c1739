"""Settings from TMQGATE_* environment variables (issue 13, deploy/): one rule for every key —
TMQGATE_ + the TOML key upper-cased, the value read as a TOML value — the environment
overriding the config file, command-line flags overriding the environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tmqgate.broker.config import BrokerConfig


def test_env_values_are_toml_values(tmp_path: Path) -> None:
    config = BrokerConfig.load(None, environ={
        "TMQGATE_NUM_PARTITIONS": "3",
        "TMQGATE_LISTENERS": '["PLAINTEXT://0.0.0.0:9092", "SASL_PLAINTEXT://0.0.0.0:9094"]',
        "TMQGATE_LISTENER_SECURITY_PROTOCOL_MAP": '{PLAINTEXT = "PLAINTEXT", SASL_PLAINTEXT = "SASL_PLAINTEXT"}',
        "TMQGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true",
        "TMQGATE_ADVERTISED_LISTENER": '"kafka.example.com:9092"',
        "TMQGATE_DATA_DIR": str(tmp_path / "data"),  # not TOML: taken as the string it is
    })
    assert config.num_partitions == 3
    assert config.listeners == ["PLAINTEXT://0.0.0.0:9092", "SASL_PLAINTEXT://0.0.0.0:9094"]
    assert config.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    assert config.allow_everyone_if_no_acl_found is True
    assert config.advertised_listener == "kafka.example.com:9092"
    assert config.data_dir == str(tmp_path / "data")


def test_env_overrides_the_file_and_flags_override_the_env(tmp_path: Path) -> None:
    path = tmp_path / "tmqgate.toml"
    path.write_text('num_partitions = 2\nadvertised_listener = "file:9092"\nlisten = "127.0.0.1:19092"\n')
    environ = {"TMQGATE_NUM_PARTITIONS": "5", "TMQGATE_LISTEN": "127.0.0.1:29092"}
    config = BrokerConfig.load(path, environ=environ, listen="127.0.0.1:39092", http=None)
    assert config.num_partitions == 5                   # env over the file
    assert config.advertised_listener == "file:9092"    # the file where the env says nothing
    assert config.listen == "127.0.0.1:39092"           # the flag over env and file


def test_other_tmqgate_variables_are_not_settings() -> None:
    config = BrokerConfig.load(None, environ={"TMQGATE_PASSWORD": "x", "TMQGATE_SPARK_JARS_DIR": "/x"})
    assert config == BrokerConfig()


def test_env_settings_are_checked_like_the_file() -> None:
    with pytest.raises(ValueError, match="http_auth must be none or basic"):
        BrokerConfig.load(None, environ={"TMQGATE_HTTP_AUTH": "bogus"})


def test_the_cli_reads_the_environment(tmp_path: Path) -> None:
    """`tmqgate serve` with TMQGATE_HTTP=0.0.0.0:… and no authentication is refused (exit 2)
    before anything starts, as the same setting in the file is."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path),
           "TMQGATE_HTTP": "0.0.0.0:6041", "TMQGATE_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "serve", "--listen", "127.0.0.1:0"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "the SQL front would listen on 0.0.0.0:6041 with no authentication" in done.stderr
