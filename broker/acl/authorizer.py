"""The broker's authorizer: the ACLs of broker/acl/model.py kept in storage, the decision with
super users, and the one question handlers ask — which of these names may the connection's
principal do this to (`allowed`), with Kafka's error codes for a refusal.

Handlers reach it through their context (`ctx.authorizer`, None when `authorizer = "none"`:
then nothing is checked and nothing costs). A decision depends only on the principal, the
client's host and the ACLs, so decisions are cached per (principal, host, operation, resource)
until the next ACL change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tmqgate.broker.acl.model import (
    AclBinding,
    AclFilter,
    AclSet,
    Operation,
    ResourceType,
    authorized_operations,
    invalid_new_acl,
)
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.identity.client import current_client
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store

CLUSTER_NAME = "kafka-cluster"
_CACHE_MAX = 100_000

# The code a refusal of a resource of each type is answered with.
DENIED_CODE = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}


class Authorizer:
    """See the module docstring."""

    def __init__(self, store: Store, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.acls = AclSet(AclBinding(*r) for r in store.acls.load())
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    def reload(self) -> None:
        """Take the stored ACLs again (a cluster's changes applied to the store)."""
        self.acls = AclSet(AclBinding(*r) for r in self._store.acls.load())
        self._cache.clear()

    # the decision ----------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, op: Operation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """The names among `names` on which `principal` from `host` may do `op`."""
        if principal in self.super_users:
            return set(names)
        cache = self._cache
        out = set()
        for name in names:
            key = (principal, host, op, resource_type, name)
            ok = cache.get(key)
            if ok is None:
                ok = self.acls.decide(principal, host, op, resource_type, name,
                                      allow_if_no_acl=self.allow_if_no_acl)
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[key] = ok
            if ok:
                out.add(name)
        return out

    def allowed(self, op: Operation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """`authorize` for the connection being served (`current_client`)."""
        client = current_client.get()
        return self.authorize(client.principal, client.host, op, resource_type, names)

    def allows(self, op: Operation, resource_type: ResourceType, name: str) -> bool:
        return bool(self.allowed(op, resource_type, (name,)))

    def allows_cluster(self, op: Operation) -> bool:
        return self.allows(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def require(self, op: Operation, resource_type: ResourceType, name: str,
                message: str | None = None) -> None:
        """Raise the resource type's *_AUTHORIZATION_FAILED unless allowed (Kafka's
        authorizeClusterOperation and the like: the whole request is refused)."""
        if not self.allows(op, resource_type, name):
            raise KafkaError(DENIED_CODE[resource_type], message)

    def require_cluster(self, op: Operation) -> None:
        self.require(op, ResourceType.CLUSTER, CLUSTER_NAME,
                     f"Cluster authorization failed: {op.name} on the cluster is not allowed.")

    def allows_by_type(self, op: Operation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType for the connection being served."""
        client = current_client.get()
        if client.principal in self.super_users:
            return True
        return self.acls.decide_by_type(client.principal, client.host, op, resource_type,
                                        allow_if_no_acl=self.allow_if_no_acl)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        """The *_authorized_operations bit set of the connection being served."""
        client = current_client.get()
        return authorized_operations(self.acls, client.principal, client.host, resource_type, name,
                                     super_user=client.principal in self.super_users,
                                     allow_if_no_acl=self.allow_if_no_acl)

    # the ACL APIs ----------------------------------------------------------------------------

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        return self.acls.matching(flt)

    def create(self, acls: Sequence[AclBinding]) -> list[str | None]:
        """Add the valid ones (one write); per binding, why it was refused or None."""
        errors = [invalid_new_acl(acl) for acl in acls]
        new = [acl for acl, err in zip(acls, errors, strict=True) if err is None and acl not in self.acls]
        if new:
            self._store.acls.update(add=new)
            for acl in new:
                self.acls.add(acl)
            self._cache.clear()
        return errors

    def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding] | str]:
        """Remove what each filter matches (one write); per filter, the removed bindings or why
        the filter was refused."""
        results: list[list[AclBinding] | str] = []
        gone: set[AclBinding] = set()
        for flt in filters:
            err = flt.unknown_field()
            if err is not None:
                results.append(err)
                continue
            matched = self.acls.matching(flt)
            gone.update(matched)
            results.append(matched)
        if gone:
            self._store.acls.update(remove=gone)
            for acl in gone:
                self.acls.remove(acl)
            self._cache.clear()
        return results
