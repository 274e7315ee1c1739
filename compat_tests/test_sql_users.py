"""TDengine's CREATE USER / ALTER USER … PASS act on the broker's SASL users (issue 12,
point 4): a user made in SQL logs in over SASL (SCRAM-SHA-512 and SCRAM-SHA-256), ALTER USER
changes the password (the old one is refused), GRANT gives the ACL that lets the user read,
and the HTTP front then authenticates the same user. tmqgate only (Kafka has no SQL front)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from .secure import SecureBroker, confluent_conf, start_secure_broker
from .tdengine_helpers import METERS_DDL, TdBroker, unique

pytestmark = pytest.mark.tmqgate_only


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker("tmqgate", tmp_path_factory.mktemp("sql-users"), users={},
                                 extra_config={"authorizer": "acl", "super_users": ["User:ANONYMOUS"]})
    try:
        yield broker
    finally:
        broker.proc.stop()


def _admin(sb: SecureBroker, user: str, password: str, mechanism: str, errors: list[str]) -> AdminClient:
    return AdminClient({**confluent_conf(sb.sasl_bootstrap, user, password, mechanism),
                        "socket.timeout.ms": 10000, "error_cb": lambda e: errors.append(e.str())})


def _topics(sb: SecureBroker, user: str, password: str, mechanism: str) -> set[str] | str:
    """The topics `user` sees over SASL_PLAINTEXT, or the errors librdkafka reported."""
    errors: list[str] = []
    admin = _admin(sb, user, password, mechanism, errors)
    try:
        return set(admin.list_topics(timeout=15).topics)
    except KafkaException as exc:
        admin.poll(1)  # serves error_cb: the authentication failure librdkafka logged
        return " | ".join([*errors, str(exc)])


def _refusal(sb: SecureBroker, user: str, password: str, mechanism: str) -> str:
    """The error librdkafka reports for a login the broker refuses. It reports it through
    error_cb on its first attempt; waiting for that rather than for a metadata timeout keeps
    the test from sleeping 15 s per refusal."""
    errors: list[str] = []
    admin = _admin(sb, user, password, mechanism, errors)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    return " | ".join(errors)


def test_create_and_alter_user_in_sql(sb: SecureBroker, tmp_path: Path) -> None:
    td = TdBroker(sb.proc)  # type: ignore[arg-type]
    db = unique("usersdb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    td.sql(METERS_DDL.format(db=db))
    assert td.sql("CREATE USER carol PASS 'carol-secret'")["code"] == 0
    status, answer = td.post("CREATE USER carol PASS 'other'")
    assert status == 400 and "carol" in answer["desc"], answer
    # carol logs in with both SCRAM mechanisms; without an ACL she sees no topic
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        assert _topics(sb, "carol", "carol-secret", mechanism) == set()
    assert "Authentication failed" in _refusal(sb, "carol", "wrong", "SCRAM-SHA-512")
    # GRANT READ on the database: its topic is hers to see
    assert td.sql(f"GRANT read ON {db}.* TO carol")["code"] == 0
    assert _topics(sb, "carol", "carol-secret", "SCRAM-SHA-512") == {db}
    # ALTER USER: the new password works, the old one no longer does
    assert td.sql("ALTER USER carol PASS 'carol-new'")["code"] == 0
    assert _topics(sb, "carol", "carol-new", "SCRAM-SHA-256") == {db}
    assert "Authentication failed" in _refusal(sb, "carol", "carol-secret", "SCRAM-SHA-512")
    status, answer = td.post("ALTER USER nobody PASS 'x'")
    assert status == 400 and "nobody" in answer["desc"], answer
