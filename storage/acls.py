"""ACLs: the authorizer's bindings, persisted so they survive a restart (the decision itself
is the broker's, broker/acl/). A binding is its own key (``storage.keys.acl_key``), so adding
one twice keeps one, and a CreateAcls or DeleteAcls of many bindings is one WriteBatch."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core

# (resource type, resource name, pattern type, principal, host, operation, permission),
# Kafka's wire codes.
AclRecord = tuple[int, str, int, str, str, int, int]


class Acls:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        #: told of every change made through ``update`` (on a cluster: broker/cluster/catalog.py
        #: publishes it), not of one applied from the cluster (``observed=False``)
        self.observers: list[Callable[[list[AclRecord], list[AclRecord]], None]] = []

    def update(self, add: Iterable[AclRecord] = (), remove: Iterable[AclRecord] = (), *, observed: bool = True) -> None:
        """Add and remove bindings in one atomic write."""
        added, removed = list(add), list(remove)
        wb = self._core.batch()
        for acl in added:
            wb.put(keys.acl_key(*acl), b"")
        for acl in removed:
            wb.delete(keys.acl_key(*acl))
        if added or removed:
            self._core.write(wb)
            if observed:
                for observer in self.observers:
                    observer(added, removed)

    def load(self) -> list[AclRecord]:
        return [keys.parse_acl_key(k) for k in self._core.db.iterator(prefix=keys.ACL, include_value=False)]
