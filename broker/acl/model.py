"""Kafka's ACL model and its decision, sans-IO (no storage, no network): what
StandardAuthorizer decides (metadata/authorizer/StandardAuthorizerData) written as data.

Rules (Apache Kafka's, the reference broker decides):

- An ACL binds a resource pattern (type, name, LITERAL or PREFIXED) to an entry (principal,
  host, operation, ALLOW or DENY). A LITERAL name `*` matches every resource of its type;
  a PREFIXED name matches every name starting with it. Principal `User:*` matches every
  principal; host `*` every host.
- The decision for (principal, host, operation, resource): a super user is allowed; else any
  matching DENY ACL denies (DENY wins); else any matching ALLOW ACL allows; else, when the
  resource has no ACL at all (of any principal), `allow_everyone_if_no_acl_found` decides;
  else denied. So with allow_everyone_if_no_acl_found, one DENY of READ on a topic for one
  principal makes that topic's every other operation need an ALLOW (its ACLs exist now).
- An ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE; an ALLOW of ALTER_CONFIGS
  implies DESCRIBE_CONFIGS. Implication is for ALLOW only: a DENY of READ does not deny
  DESCRIBE. ALL matches every operation, allowed or denied.
- Filters (DescribeAcls, DeleteAcls) match with ANY for any value, null for any name /
  principal / host, and pattern type MATCH: every pattern that would match the name.

The numeric values are Kafka's wire codes (AclOperation, ResourceType, PatternType,
AclPermissionType).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

# ALLOW ACLs of these operations allow DESCRIBE / DESCRIBE_CONFIGS too.
IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}

# The operations each resource type has (Kafka's *_authorized_operations bit sets list these).
OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


class AclBinding(NamedTuple):
    """One ACL, as stored (the field order is storage's AclRecord's)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter (None: any name / principal / host)."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Operation.ANY
    permission: int = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        """Kafka's AclBindingFilter.matches (ResourcePatternFilter, AccessControlEntryFilter)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        if self.resource_name is not None:
            if pt in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):  # PREFIXED
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != Operation.ANY and self.operation != acl.operation:
            return False
        return self.permission == Permission.ANY or self.permission == acl.permission

    def unknown_field(self) -> str | None:
        """Kafka's validateFilter: a filter with an UNKNOWN value is an INVALID_REQUEST."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            return "Unknown entryFilter."
        return None


def _name(enum: type[IntEnum], value: int) -> str:
    try:
        return enum(value).name
    except ValueError:
        return "UNKNOWN"


def invalid_new_acl(acl: AclBinding) -> str | None:
    """Why CreateAcls refuses `acl` (INVALID_REQUEST with this message), or None: the broker's
    checks (AclApis) then the controller's (AclControlManager.validateNewAcl)."""
    rt = acl.resource_type
    if rt == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY) or rt not in ResourceType.__members__.values():
        return f"Invalid resourceType {_name(ResourceType, rt)}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {_name(PatternType, acl.pattern_type)}"
    op = acl.operation
    if op in (Operation.UNKNOWN, Operation.ANY) or op not in Operation.__members__.values():
        return f"Invalid operation {_name(Operation, op)}"
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {_name(Permission, acl.permission)}"
    return None


def _entry_result(acl: AclBinding, principals: tuple[str, str], host: str, op: Operation) -> int:
    """Kafka's findResult: ALLOW, DENY, or 0 when `acl` says nothing about this request."""
    if acl.principal not in principals:
        return 0
    if acl.host != WILDCARD and acl.host != host:
        return 0
    if acl.operation != Operation.ALL:
        if acl.permission == Permission.ALLOW:
            implied = IMPLIES.get(op)
            if implied is not None:
                if acl.operation not in implied:
                    return 0
            elif acl.operation != op:
                return 0
        elif acl.operation != op:
            return 0
    return int(acl.permission)


@dataclass
class _TypeAcls:
    """The ACLs of one resource type, indexed by how they match a name."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)  # `*` included
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: set[int] = field(default_factory=set)

    def matching(self, name: str) -> Iterator[AclBinding]:
        """Every ACL whose pattern matches the resource `name`."""
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        for n in self.prefix_lengths:
            if n <= len(name):
                yield from self.prefixed.get(name[:n], ())


class AclSet:
    """All ACLs, indexed for the decision. Mutated only through add / remove."""

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self._all: set[AclBinding] = set()
        self._by_type: dict[int, _TypeAcls] = {}
        for acl in acls:
            self.add(acl)

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(sorted(self._all))

    def __contains__(self, acl: object) -> bool:
        return acl in self._all

    def add(self, acl: AclBinding) -> bool:
        """Add `acl`; False if it was there already."""
        if acl in self._all:
            return False
        self._all.add(acl)
        t = self._by_type.setdefault(acl.resource_type, _TypeAcls())
        if acl.pattern_type == PatternType.PREFIXED:
            t.prefixed.setdefault(acl.resource_name, []).append(acl)
            t.prefix_lengths.add(len(acl.resource_name))
        else:
            t.literal.setdefault(acl.resource_name, []).append(acl)
        return True

    def remove(self, acl: AclBinding) -> bool:
        if acl not in self._all:
            return False
        self._all.discard(acl)
        t = self._by_type[acl.resource_type]
        index = t.prefixed if acl.pattern_type == PatternType.PREFIXED else t.literal
        bucket = index[acl.resource_name]
        bucket.remove(acl)
        if not bucket:
            del index[acl.resource_name]
            if acl.pattern_type == PatternType.PREFIXED:
                t.prefix_lengths = {len(p) for p in t.prefixed}
        return True

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        return [acl for acl in self if flt.matches(acl)]

    def decide(self, principal: str, host: str, op: Operation, resource_type: ResourceType,
               name: str, *, allow_if_no_acl: bool) -> bool:
        """StandardAuthorizerData.findAclRule (super users are the Authorizer's to check)."""
        t = self._by_type.get(resource_type)
        if t is None:
            return allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        found = allowed = False
        for acl in t.matching(name):
            found = True
            result = _entry_result(acl, principals, host, op)
            if result == Permission.DENY:
                return False
            if result == Permission.ALLOW:
                allowed = True
        if allowed:
            return True
        return allow_if_no_acl and not found

    def decide_by_type(self, principal: str, host: str, op: Operation,
                       resource_type: ResourceType, *, allow_if_no_acl: bool) -> bool:
        """Kafka's Authorizer.authorizeByResourceType (default method): allowed when a
        resource named "hardcode" would be, or when some ALLOW ACL of `op` for this principal
        and host names a pattern no DENY ACL of theirs covers (a LITERAL or PREFIXED deny of a
        prefix of it, or a LITERAL `*` deny)."""
        if self.decide(principal, host, op, resource_type, "hardcode", allow_if_no_acl=allow_if_no_acl):
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        deny: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        t = self._by_type.get(resource_type)
        if t is None:
            return False
        for acl in [*(a for b in t.literal.values() for a in b), *(a for b in t.prefixed.values() for a in b)]:
            if acl.principal not in principals or (acl.host != WILDCARD and acl.host != host):
                continue
            if acl.operation not in (op, Operation.ALL):
                continue
            (deny if acl.permission == Permission.DENY else allow)[acl.pattern_type].add(acl.resource_name)
        if WILDCARD in deny[PatternType.LITERAL]:
            return False
        if WILDCARD in allow[PatternType.LITERAL]:
            return True
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if any(name.startswith(p) for p in deny[PatternType.PREFIXED]):
                    continue
                return True
        return False


def authorized_operations(acls: AclSet, principal: str, host: str, resource_type: ResourceType,
                          name: str, *, super_user: bool, allow_if_no_acl: bool) -> int:
    """Kafka's *_authorized_operations: a bit per operation of the type the principal has."""
    bits = 0
    for op in OPERATIONS[resource_type]:
        if super_user or acls.decide(principal, host, op, resource_type, name,
                                     allow_if_no_acl=allow_if_no_acl):
            bits |= 1 << int(op)
    return bits
