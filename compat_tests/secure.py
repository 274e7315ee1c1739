"""Brokers with SASL (issue 12): tmqgate or the reference Kafka configured the same way, with
a SASL_PLAINTEXT listener beside PLAINTEXT (and SASL_SSL too when given certificates), the
same SCRAM users, and client settings for each client library.

    sb = start_secure_broker(target, workdir, users={"alice": "alice-secret"})
    sb.bootstrap          # PLAINTEXT (admin work, user management)
    sb.sasl_bootstrap     # SASL_PLAINTEXT
    confluent_conf(sb, "alice", "alice-secret", "SCRAM-SHA-512")

Users are created online on both brokers the same way, with AlterUserScramCredentials over
PLAINTEXT (SCRAM-SHA-512 and SCRAM-SHA-256 each); PLAIN checks the same users (tmqgate checks
PLAIN against the SCRAM credentials; Kafka's PLAIN takes its JAAS `user_NAME` entries, which
are written with the same passwords). OAUTHBEARER takes Kafka's unsecured tokens on both.

For the ACL and TLS tests: `secure_broker_fixture(users=..., config=...)` makes a module
fixture; `extra_config` is in the target's own terms (tmqgate TOML keys, Kafka properties).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .brokers import BrokerProcess, new_broker
from .helpers import wait_until
from .raw import RawConn

SASL_LISTENER = "SASL_PLAINTEXT"
SASL_SSL_LISTENER = "SASL_SSL"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER")
DEFAULT_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
_SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}


@dataclass
class SecureBroker:
    target: str
    proc: BrokerProcess
    users: dict[str, str]
    listener_ports: dict[str, int] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener_ports['PLAINTEXT']}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener_ports[SASL_LISTENER]}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener_ports[SASL_SSL_LISTENER]}"

    def add_user(self, name: str, password: str, mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "SCRAM-SHA-256"),
                 iterations: int = 4096) -> None:
        add_scram_user(self.bootstrap, name, password, mechanisms, iterations)
        self.users[name] = password


def kafka_sasl_config(users: Mapping[str, str], mechanisms: tuple[str, ...], reauth_ms: int,
                      listeners: tuple[str, ...] = (SASL_LISTENER,)) -> dict[str, str]:
    """Kafka's properties for SASL listeners taking `mechanisms` (JAAS per listener and mechanism)."""
    config = {"sasl.enabled.mechanisms": ",".join(mechanisms), "connections.max.reauth.ms": str(reauth_ms)}
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    jaas = {
        "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "plain": f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
        "oauthbearer": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                       'unsecuredLoginStringClaim_sub="admin";',
    }
    for listener in listeners:
        for mechanism in mechanisms:
            key = mechanism.lower()
            config[f"listener.name.{listener.lower()}.{key}.sasl.jaas.config"] = jaas[key]
    return config


def tmqgate_sasl_config(mechanisms: tuple[str, ...], reauth_ms: int) -> dict[str, Any]:
    return {"sasl_enabled_mechanisms": list(mechanisms), "connections_max_reauth_ms": reauth_ms}


def add_scram_user(bootstrap: str, name: str, password: str,
                   mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "SCRAM-SHA-256"), iterations: int = 4096,
                   timeout: float = 30.0) -> None:
    """AlterUserScramCredentials over PLAINTEXT (one request per mechanism, as kafka-configs),
    then wait until DescribeUserScramCredentials shows it (Kafka applies it through its
    metadata log)."""
    with RawConn(bootstrap) as c:
        for mechanism in mechanisms:
            code, algo = _SCRAM[mechanism]
            salt = secrets.token_bytes(24)
            salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)
            body = c.request(51, 0, {"deletions": [], "upsertions": [
                {"name": name, "mechanism": code, "iterations": iterations, "salt": salt, "salted_password": salted}]})
            assert [(r["user"], r["error_code"]) for r in body["results"]] == [(name, 0)], body
        want = {_SCRAM[m][0] for m in mechanisms}
        wait_until(lambda: c.request(50, 0, {"users": [{"name": name}]}), timeout, 0.1, f"user {name} described",
                   ok=lambda body: want <= {i["mechanism"] for r in body["results"] for i in r["credential_infos"]})


def start_secure_broker(target: str, workdir: Path, *, users: Mapping[str, str] | None = None,
                        mechanisms: tuple[str, ...] = MECHANISMS, reauth_ms: int = 0,
                        extra_config: Mapping[str, Any] | None = None,
                        sasl_ssl: bool = False) -> SecureBroker:
    """Start a broker of `target` with PLAINTEXT and SASL_PLAINTEXT listeners (and SASL_SSL if
    `sasl_ssl`; give the TLS settings in `extra_config`), `mechanisms` enabled, and `users`
    (name -> password) created."""
    users = dict(DEFAULT_USERS if users is None else users)
    listeners = {SASL_LISTENER: "SASL_PLAINTEXT", **({SASL_SSL_LISTENER: "SASL_SSL"} if sasl_ssl else {})}
    if target == "kafka":
        config: dict[str, Any] = kafka_sasl_config(users, mechanisms, reauth_ms, tuple(listeners))
    else:
        config = tmqgate_sasl_config(mechanisms, reauth_ms)
    config.update(extra_config or {})
    proc = new_broker(target, workdir, config=config, extra_listeners=listeners)
    proc.start()
    sb = SecureBroker(target, proc, {}, dict(proc.listener_ports))
    try:
        for name, password in users.items():
            sb.add_user(name, password)
    except BaseException:
        proc.stop()
        raise
    return sb


def secure_broker_fixture(scope: str = "module", **kwargs: Any) -> Callable[..., Iterator[SecureBroker]]:
    """A pytest fixture starting a `start_secure_broker(target, ..., **kwargs)` for its scope."""

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory: pytest.TempPathFactory, target: str,
                pytestconfig: pytest.Config) -> Iterator[SecureBroker]:
        if pytestconfig.getoption("--bootstrap"):
            pytest.skip("--bootstrap given: these tests start a broker with SASL listeners")
        sb = start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-sasl"), **kwargs)
        try:
            yield sb
        finally:
            sb.proc.stop()

    return fixture


# client settings ----------------------------------------------------------------------------


def unsecured_jwt(sub: str, lifetime_s: int = 3600) -> str:
    """An unsecured JWS (alg none) as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes."""
    import base64
    import json

    def enc(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{enc({'alg': 'none'})}.{enc({'sub': sub, 'iat': now, 'exp': now + lifetime_s})}."


def confluent_conf(bootstrap: str, user: str, password: str, mechanism: str,
                   protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": protocol,
                            "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True,
                     "sasl.oauthbearer.config": f"principal={user}"})
    else:
        conf.update({"sasl.username": user, "sasl.password": password})
    return conf


def kafka_python_conf(bootstrap: str, user: str, password: str, mechanism: str,
                      protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": protocol,
                            "sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        conf["sasl_oauth_token_provider"] = _kp_token_provider(user)
    else:
        conf.update({"sasl_plain_username": user, "sasl_plain_password": password})
    return conf


def _kp_token_provider(sub: str) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return unsecured_jwt(sub)

    return Provider()


def aiokafka_conf(bootstrap: str, user: str, password: str, mechanism: str,
                  protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": protocol,
                            "sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        from aiokafka.abc import AbstractTokenProvider

        class Provider(AbstractTokenProvider):  # type: ignore[misc]
            async def token(self) -> str:
                return unsecured_jwt(user)

        conf["sasl_oauth_token_provider"] = Provider()
    else:
        conf.update({"sasl_plain_username": user, "sasl_plain_password": password})
    return conf


def java_client_properties(user: str, password: str, mechanism: str, protocol: str = "SASL_PLAINTEXT",
                           extra: Mapping[str, str] | None = None) -> str:
    """A --command-config / --producer.config file's text for the Java client and tools."""
    if mechanism.startswith("SCRAM"):
        jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{user}" password="{password}";')
    elif mechanism == "PLAIN":
        jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'username="{user}" password="{password}";')
    else:
        jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{user}";')
    lines = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.jaas.config": jaas, **(extra or {})}
    return "".join(f"{k}={v}\n" for k, v in lines.items())
