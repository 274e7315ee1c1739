"""Settings from TMQGATE_* environment variables (issue 13, deploy/): one rule for every key —
TMQGATE_ + the TOML key upper-cased, the value read as a TOML value — the environment
overriding the config file, command-line flags overriding the environment."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.environment import settings_from_env
from tmqgate.broker.configs.values import ConfigError


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
    """The TMQGATE_* variables the project reads elsewhere (ENV_NOT_SETTINGS) are left alone."""
    config = BrokerConfig.load(None, environ={
        "TMQGATE_PASSWORD": "x", "TMQGATE_ADMIN_PASSWORD": "x", "TMQGATE_HOST": "kafka.example.com",
        "TMQGATE_SPARK_JARS_DIR": "/x", "TMQGATE_SPARK_LOG_LEVEL": "INFO",
        "TMQGATE_FUZZ_INPUTS": "10", "TMQGATE_FUZZ_SEED": "3", "PATH": "/bin", "TMQGATEWAY": "not ours"})
    assert config == BrokerConfig()


@pytest.mark.parametrize(("environ", "line"), [
    ({"TMQGATE_WAL_LEVLE": "2"},
     "environment: unknown setting TMQGATE_WAL_LEVLE (did you mean TMQGATE_WAL_LEVEL? the settings are listed in "
     "docs/CONFIG.md, each as TMQGATE_ + its key upper-cased)"),
    ({"TMQGATE_PASSWROD": "x", "TMQGATE_COLOUR": "red"},
     "environment: unknown settings TMQGATE_COLOUR, TMQGATE_PASSWROD (TMQGATE_PASSWROD: did you mean "
     "TMQGATE_PASSWORD? the settings are listed in docs/CONFIG.md, each as TMQGATE_ + its key upper-cased)"),
    ({"TMQGATE_CONFIG": "/etc/tmqgate/tmqgate.toml"},  # a flag's name, not a setting: --config
     "environment: unknown setting TMQGATE_CONFIG (the settings are listed in docs/CONFIG.md, each as TMQGATE_ + "
     "its key upper-cased)"),
])
def test_unknown_tmqgate_variables_are_refused(environ: dict[str, str], line: str) -> None:
    """A misspelt TMQGATE_WAL_LEVLE was ignored where the same key in a file is refused."""
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.load(None, environ=environ)
    assert str(refused.value) == line


def _variables_set(path: Path) -> set[str]:
    """The TMQGATE_* variables a deploy file sets for a tmqgate process: compose services'
    `environment:` keys, Dockerfile ENV lines, systemd Environment= lines."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        services = (yaml.safe_load(text) or {}).get("services", {})
        return {k for s in services.values() for k in (s.get("environment") or {}) if k.startswith("TMQGATE_")}
    return set(re.findall(r"^(?:ENV|Environment=)\s*(TMQGATE_\w+)", text, re.M))


def test_deploy_files_and_the_suites_set_nothing_refused() -> None:
    """What the shipped deploy files set, and every TMQGATE_* name the code and tests mention as
    a variable (os.environ, env dicts, compose interpolation), is a setting's or allowed."""
    root = Path(__file__).resolve().parent.parent
    known = {f.name for f in fields(BrokerConfig)}
    set_by_deploy = set().union(*(_variables_set(p) for p in sorted((root / "deploy").rglob("*"))
                                  if p.is_file() and (p.suffix in (".yaml", ".yml", ".service") or
                                                      p.name == "Dockerfile")))
    assert "TMQGATE_DATA_DIR" in set_by_deploy and "TMQGATE_ADMIN_PASSWORD" in set_by_deploy
    assert "TMQGATE_PASSWORD" in set_by_deploy  # compose's setup service (tmqgate sql --user admin)
    mentioned = set()
    refusal_tests = {Path(__file__).resolve(), root / "tests" / "test_cli_startup.py"}  # typos on purpose
    for folder in ("compat_tests", "tests", "deploy", "scripts", "bench", "pipelines", "broker", ".ci"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in ("", ".py", ".sh", ".yaml", ".service", ".toml", ".md") \
                    and path.resolve() not in refusal_tests:
                text = path.read_text(errors="replace")
                # a variable: read from or put into an environment, or interpolated by compose
                mentioned |= set(re.findall(r"(?:environ(?:\.get)?\(|environ\[|\$\{|\$|[\"']|-e |export )"
                                            r"(TMQGATE_[A-Z0-9_]+)(?=[\"'}:=\s)\]-])", text))
    assert {"TMQGATE_CI", "TMQGATE_PASSWORD", "TMQGATE_SPARK_JARS_DIR"} <= mentioned  # the scan finds them
    names = set_by_deploy | {n for n in mentioned if not n.endswith("_")}
    names -= {"TMQGATE_IMAGE_TAG"}  # compat_tests/containers.py: a Python name, never a variable
    refused = []
    for name in sorted(names):
        try:
            settings_from_env(known, {name: "1"})
        except ConfigError:
            refused.append(name)
    assert refused == []


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
