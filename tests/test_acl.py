"""The ACL model's decision (StandardAuthorizer's rules) and the ACLs' persistence."""

from __future__ import annotations

from pathlib import Path

from tmqgate.broker.acl.authorizer import Authorizer
from tmqgate.broker.acl.model import (
    AclBinding,
    AclFilter,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorized_operations,
    invalid_new_acl,
)
from tmqgate.broker.identity.client import ClientInfo, current_client
from tmqgate.storage import Store

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(name: str, op: Operation, perm: Permission = ALLOW, principal: str = "User:alice",
        host: str = "*", pattern: PatternType = LIT, rt: ResourceType = T) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def decide(acls: AclSet, op: Operation, name: str, principal: str = "User:alice", host: str = "10.0.0.1",
           rt: ResourceType = T, allow_if_no_acl: bool = False) -> bool:
    return acls.decide(principal, host, op, rt, name, allow_if_no_acl=allow_if_no_acl)


def test_no_acl_follows_allow_everyone_if_no_acl_found() -> None:
    acls = AclSet()
    assert not decide(acls, Op.READ, "t")
    assert decide(acls, Op.READ, "t", allow_if_no_acl=True)


def test_any_acl_on_the_resource_turns_the_default_off() -> None:
    # Bob's DENY on t means t has ACLs: alice's READ needs an ALLOW now even with allow-everyone.
    acls = AclSet([acl("t", Op.READ, DENY, principal="User:bob")])
    assert not decide(acls, Op.READ, "t", allow_if_no_acl=True)
    assert decide(acls, Op.READ, "other", allow_if_no_acl=True)


def test_deny_wins_over_allow() -> None:
    acls = AclSet([acl("t", Op.READ), acl("t", Op.READ, DENY)])
    assert not decide(acls, Op.READ, "t")
    acls = AclSet([acl("*", Op.ALL), acl("secret", Op.READ, DENY, pattern=PRE)])
    assert decide(acls, Op.READ, "public")
    assert not decide(acls, Op.READ, "secret-1")
    assert decide(acls, Op.WRITE, "secret-1")


def test_patterns_literal_prefixed_wildcard() -> None:
    acls = AclSet([acl("orders", Op.READ), acl("log-", Op.READ, pattern=PRE), acl("*", Op.WRITE)])
    assert decide(acls, Op.READ, "orders")
    assert not decide(acls, Op.READ, "orders2")
    assert decide(acls, Op.READ, "log-a")
    assert decide(acls, Op.READ, "log-")
    assert not decide(acls, Op.READ, "log")
    assert decide(acls, Op.WRITE, "anything")
    assert not decide(acls, Op.READ, "anything")


def test_principal_and_host_wildcards() -> None:
    acls = AclSet([acl("t", Op.READ, principal="User:*"), acl("u", Op.READ, host="10.0.0.9")])
    assert decide(acls, Op.READ, "t", principal="User:bob")
    assert not decide(acls, Op.READ, "u")
    assert decide(acls, Op.READ, "u", host="10.0.0.9")


def test_implied_describe_for_allow_only() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert decide(AclSet([acl("t", op)]), Op.DESCRIBE, "t"), op
    assert not decide(AclSet([acl("t", Op.CREATE)]), Op.DESCRIBE, "t")
    assert decide(AclSet([acl("t", Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS, "t")
    # A DENY of READ does not deny DESCRIBE (nor allow it: the topic has ACLs now).
    acls = AclSet([acl("t", Op.READ, DENY), acl("t", Op.DESCRIBE)])
    assert decide(acls, Op.DESCRIBE, "t")
    assert not decide(acls, Op.READ, "t")
    # ALL matches every operation, both ways.
    assert decide(AclSet([acl("t", Op.ALL)]), Op.ALTER_CONFIGS, "t")
    assert not decide(AclSet([acl("t", Op.ALL), acl("t", Op.ALL, DENY)]), Op.DESCRIBE, "t")


def test_by_resource_type() -> None:
    acls = AclSet([acl("a", Op.WRITE)])
    assert acls.decide_by_type("User:alice", "h", Op.WRITE, T, allow_if_no_acl=False)
    assert not acls.decide_by_type("User:bob", "h", Op.WRITE, T, allow_if_no_acl=False)
    acls.add(acl("a", Op.WRITE, DENY, pattern=PRE))
    assert not acls.decide_by_type("User:alice", "h", Op.WRITE, T, allow_if_no_acl=False)


def test_filters() -> None:
    a = acl("log-", Op.READ, pattern=PRE)
    b = acl("log-a", Op.WRITE, DENY)
    c = acl("*", Op.DESCRIBE, rt=G)
    acls = AclSet([a, b, c])
    assert acls.matching(AclFilter()) == sorted([a, b, c])
    assert acls.matching(AclFilter(T, "log-a", PatternType.MATCH)) == sorted([a, b])
    assert acls.matching(AclFilter(T, "log-a", PatternType.ANY)) == [b]
    assert acls.matching(AclFilter(T, "log-", PRE)) == [a]
    assert acls.matching(AclFilter(G, "g1", PatternType.MATCH)) == [c]
    assert acls.matching(AclFilter(permission=DENY)) == [b]
    assert AclFilter(resource_type=ResourceType.UNKNOWN).unknown_field() == "Unknown patternFilter."


def test_new_acl_validation() -> None:
    assert invalid_new_acl(acl("t", Op.READ)) is None
    assert invalid_new_acl(acl("x", Op.ALTER, rt=C)) == \
        "The only valid name for the CLUSTER resource is kafka-cluster"
    assert invalid_new_acl(acl("", Op.READ)) == "Invalid empty resource name"
    assert invalid_new_acl(acl("t", Op.ANY)) == "Invalid operation ANY"
    assert invalid_new_acl(acl("t", Op.READ, pattern=PatternType.MATCH)) == "Invalid patternType MATCH"
    assert invalid_new_acl(acl("t", Op.READ, perm=Permission.ANY)) == "Invalid permissionType ANY"


def test_authorized_operations_bits() -> None:
    acls = AclSet([acl("t", Op.READ)])
    bits = authorized_operations(acls, "User:alice", "h", T, "t", super_user=False, allow_if_no_acl=False)
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_authorizer_persists_and_super_users(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with Store(path) as store:
        auth = Authorizer(store, super_users=["User:admin"])
        assert auth.create([acl("t", Op.READ), acl("t", Op.READ), acl("", Op.READ)]) == \
            [None, None, "Invalid empty resource name"]
        token = current_client.set(ClientInfo("10.0.0.1", 1, principal="User:alice"))
        try:
            assert auth.allowed(Op.READ, T, ["t", "u"]) == {"t"}
        finally:
            current_client.reset(token)
    with Store(path) as store:
        auth = Authorizer(store, super_users=["User:admin"])
        assert list(auth.acls) == [acl("t", Op.READ)]
        assert auth.authorize("User:admin", "h", Op.DELETE, T, ["t", "u"]) == {"t", "u"}
        assert auth.authorize("User:alice", "h", Op.READ, T, ["t"]) == {"t"}
        [removed] = auth.delete([AclFilter(T, "t", LIT)])
        assert removed == [acl("t", Op.READ)]
        assert auth.authorize("User:alice", "h", Op.READ, T, ["t"]) == set()  # the cache dropped
    with Store(path) as store:
        assert list(Authorizer(store).acls) == []


def test_sql_grant_revoke_users_parse_and_needs() -> None:
    from tmqgate.broker.sql import access, ast
    from tmqgate.broker.sql.parser import parse

    assert parse("GRANT read ON power.* TO alice") == ast.Grant("read", "power", "alice")
    assert parse("REVOKE ALL ON power.* FROM bob") == ast.Grant("all", "power", "bob", revoke=True)
    assert parse("CREATE USER alice PASS 'secret'") == ast.UserPassword("alice", "secret")
    assert parse("ALTER USER alice PASS 'new'") == ast.UserPassword("alice", "new", create=False)
    assert access.needs(parse("CREATE TOPIC v AS SELECT ts FROM meters"), "power") == [
        (("CREATE", "CLUSTER", "kafka-cluster"), ("CREATE", "TOPIC", "v")), (("READ", "TOPIC", "power"),)]
    assert access.needs(parse("SELECT * FROM power.meters"), None) == [(("READ", "TOPIC", "power"),)]
    assert access.needs(parse("GRANT write ON power.* TO a"), None) == [(("ALTER", "CLUSTER", "kafka-cluster"),)]
    assert access.needs(parse("SHOW DATABASES"), None) == []
    assert access.needs(parse("SHOW DNODES"), None) == []  # as Metadata's brokers: anyone's
    assert access.needs(parse("SHOW VGROUPS"), "power") == [(("DESCRIBE", "TOPIC", "power"),)]
    assert access.needs(parse("SHOW power.VGROUPS"), None) == [(("DESCRIBE", "TOPIC", "power"),)]
