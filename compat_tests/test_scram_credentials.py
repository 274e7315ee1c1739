"""SCRAM users online (KIP-554): `kafka-configs --entity-type users --alter --add-config
'SCRAM-SHA-512=[...]'`, `--describe`, `--delete-config`, and the Describe/AlterUserScramCredentials
answers underneath, over PLAINTEXT, the same on both brokers."""

from __future__ import annotations

import hashlib
import uuid

from . import cli_helpers as cli
from .conftest import Broker
from .raw import RawConn

DESCRIBE, ALTER = 50, 51


def _user(tag: str) -> str:
    return f"u-{tag}-{uuid.uuid4().hex[:8]}"


def _describe(broker: Broker, names: list[str] | None) -> dict:
    with RawConn(broker.bootstrap) as c:
        return c.request(DESCRIBE, 0, {"users": None if names is None else [{"name": n} for n in names]})


def _alter(broker: Broker, deletions: list[dict], upsertions: list[dict]) -> dict[str, tuple[int, str | None]]:
    with RawConn(broker.bootstrap) as c:
        body = c.request(ALTER, 0, {"deletions": deletions, "upsertions": upsertions})
    return {r["user"]: (r["error_code"], r["error_message"]) for r in body["results"]}


def _upsert(name: str, mechanism: int = 2, iterations: int = 4096) -> dict:
    salt = b"0123456789abcdef"
    algo = "sha512" if mechanism == 2 else "sha256"
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": hashlib.pbkdf2_hmac(algo, b"pw", salt, max(iterations, 1))}


def test_kafka_configs_add_describe_delete_scram_user(broker: Broker) -> None:
    cli.require_tools()
    alice = _user("alice")
    for config in ("SCRAM-SHA-512=[iterations=8192,password=alice-secret]", "SCRAM-SHA-256=[password=alice-256]"):
        out = cli.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
                      "--entity-name", alice, "--alter", "--add-config", config)
        assert f"Completed updating config for user {alice}." in out.stdout, out.describe()
    # two mechanisms of one user in one request: Kafka refuses the pair (one AlterUserScramCredentials)
    out = cli.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
                  "--entity-name", alice, "--alter", "--add-config",
                  "SCRAM-SHA-512=[password=x],SCRAM-SHA-256=[password=y]", check=False)
    assert out.returncode == 1
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same request" in out.stderr
    body = _describe(broker, [alice])
    assert body["error_code"] == 0
    [result] = body["results"]
    assert result["user"] == alice and result["error_code"] == 0
    assert sorted((i["mechanism"], i["iterations"]) for i in result["credential_infos"]) == [(1, 4096), (2, 8192)]
    # all users (null) include alice
    assert alice in {r["user"] for r in _describe(broker, None)["results"]}
    out = cli.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
                  "--entity-name", alice, "--alter", "--delete-config", "SCRAM-SHA-256")
    assert f"Completed updating config for user {alice}." in out.stdout, out.describe()
    [result] = _describe(broker, [alice])["results"]
    assert [(i["mechanism"], i["iterations"]) for i in result["credential_infos"]] == [(2, 8192)]


def test_kafka_configs_describe_scram_user(broker: Broker) -> None:
    """`--describe` of a user lists its SCRAM credentials (the tool also asks
    DescribeClientQuotas, so this needs that API too)."""
    cli.require_tools()
    bob = _user("bob")
    cli.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
            "--entity-name", bob, "--alter", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=bob-secret]")
    out = cli.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
                  "--entity-name", bob, "--describe")
    assert f"SCRAM credential configs for user-principal '{bob}' are SCRAM-SHA-512=iterations=8192" in out.stdout, \
        out.describe()


def test_describe_unknown_and_duplicate_users(broker: Broker) -> None:
    ghost = _user("ghost")
    body = _describe(broker, [ghost])
    assert body["error_code"] == 0
    assert [(r["user"], r["error_code"], r["error_message"]) for r in body["results"]] == [
        (ghost, 91, f"Attempt to describe a user credential that does not exist: {ghost}")]
    body = _describe(broker, [ghost, ghost])
    assert [(r["user"], r["error_code"], r["error_message"]) for r in body["results"]] == [
        (ghost, 92, f"Cannot describe SCRAM credentials for the same user twice in a single request: {ghost}")]


def test_alter_refusals(broker: Broker) -> None:
    few, many, ghost, twice, ok, unknown_mech = (_user(t) for t in ("few", "many", "ghost", "twice", "ok", "mech"))
    results = _alter(broker, [{"name": ghost, "mechanism": 2}, {"name": twice, "mechanism": 2}],
                     [_upsert(few, iterations=1024), _upsert(many, iterations=16385), _upsert(twice),
                      _upsert(ok, mechanism=1, iterations=16384), _upsert(unknown_mech, mechanism=7),
                      _upsert("")])
    assert results[few] == (93, "Too few iterations")
    assert results[many] == (93, "Too many iterations")
    assert results[ghost] == (91, "Attempt to delete a user credential that does not exist")
    assert results[twice][0] == 91  # the deletion is checked first: it does not exist
    assert results[unknown_mech] == (33, "Unknown SCRAM mechanism")
    assert results[""] == (93, "Username must not be empty")
    assert results[ok] == (0, None)
    [result] = _describe(broker, [ok])["results"]
    assert [(i["mechanism"], i["iterations"]) for i in result["credential_infos"]] == [(1, 16384)]
    [result] = _describe(broker, [few])["results"]
    assert result["error_code"] == 91


def test_sasl_apis_on_a_plaintext_listener(broker: Broker) -> None:
    """SaslHandshake / SaslAuthenticate on a PLAINTEXT listener: ILLEGAL_SASL_STATE, and the
    connection goes on."""
    with RawConn(broker.bootstrap) as c:
        versions = c.api_versions()
        assert versions[17] == (0, 1) and versions[36] == (0, 2)
        assert versions[50] == (0, 0) and versions[51] == (0, 0)
        body = c.request(17, 1, {"mechanism": "PLAIN"})
        assert body["error_code"] == 34 and body["mechanisms"] == []
        body = c.request(36, 2, {"auth_bytes": b"\0alice\0pw"})
        assert body["error_code"] == 34
        assert body["error_message"] == "SaslAuthenticate request received after successful authentication"
        assert c.api_versions()[18][1] >= 3
