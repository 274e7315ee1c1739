"""Settings from the environment: TMQGATE_<KEY> for any setting's key, and the TMQGATE_*
names that belong to other parts of the project (refused otherwise, as a file's unknown key).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping

from tmqgate.broker.configs.values import ConfigError, unknown_names

ENV_PREFIX = "TMQGATE_"
#: TMQGATE_* environment variables that are not settings, each read by a part of the project
#: other than `tmqgate serve` (a name ending in "_" stands for every name it begins): the
#: password of `tmqgate sql --user` (TMQGATE_PASSWORD); deploy/compose.yaml's admin password and
#: host name (TMQGATE_ADMIN_PASSWORD, TMQGATE_HOST); the Spark pipelines' (TMQGATE_SPARK_JARS_DIR,
#: TMQGATE_SPARK_LOG_LEVEL: pipelines/session.py); the test runs' (TMQGATE_CI, set by .ci/run;
#: TMQGATE_TEST_LOCK, by scripts/test.sh; the compat suite's fuzzer TMQGATE_FUZZ_INPUTS and
#: TMQGATE_FUZZ_SEED) and scripts/install_docker.sh's (TMQGATE_DEBIAN_MIRROR, TMQGATE_DOCKERD_LOG).
#: Brokers started by tests and tools inherit their environment, so each must be listed here;
#: every other TMQGATE_* variable must be a setting's (BrokerConfig.load refuses the rest, as a
#: file's unknown key). tests/test_config_env.py checks the repository against this list.
ENV_NOT_SETTINGS = ("TMQGATE_PASSWORD", "TMQGATE_ADMIN_PASSWORD", "TMQGATE_HOST", "TMQGATE_SPARK_", "TMQGATE_CI",
                    "TMQGATE_TEST_", "TMQGATE_FUZZ_", "TMQGATE_DEBIAN_MIRROR", "TMQGATE_DOCKERD_LOG")


def settings_from_env(known: set[str], environ: Mapping[str, str]) -> dict[str, object]:
    """The settings given as TMQGATE_<KEY> variables (see BrokerConfig.load); ConfigError for
    a TMQGATE_* variable that is neither a setting's nor one of ENV_NOT_SETTINGS."""
    values: dict[str, object] = {}
    for name in known:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        try:
            values[name] = tomllib.loads(f"value = {raw}")["value"]
        except tomllib.TOMLDecodeError:
            values[name] = raw
    settings = {ENV_PREFIX + name.upper() for name in known}
    unknown = sorted(v for v in environ if v.startswith(ENV_PREFIX) and v not in settings and not any(
        v == other or (other.endswith("_") and v.startswith(other)) for other in ENV_NOT_SETTINGS))
    if unknown:
        candidates = sorted(settings) + [v for v in ENV_NOT_SETTINGS if not v.endswith("_")]
        raise ConfigError("environment: " + unknown_names(
            unknown, candidates, len(ENV_PREFIX), "the settings are listed in docs/CONFIG.md, each as TMQGATE_ + "
            "its key upper-cased"))
    return values
