"""ACLs: the authorizer's bindings, persisted so they survive a restart (the decision itself
is the broker's, broker/acl/). A binding is its own key (``storage.keys.acl_key``), so adding
one twice keeps one, and a CreateAcls or DeleteAcls of many bindings is one WriteBatch."""

from __future__ import annotations

from collections.abc import Iterable
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

    def update(self, add: Iterable[AclRecord] = (), remove: Iterable[AclRecord] = ()) -> None:
        """Add and remove bindings in one atomic write."""
        wb = self._core.batch()
        n = 0
        for acl in add:
            wb.put(keys.acl_key(*acl), b"")
            n += 1
        for acl in remove:
            wb.delete(keys.acl_key(*acl))
            n += 1
        if n:
            self._core.write(wb)

    def load(self) -> list[AclRecord]:
        return [keys.parse_acl_key(k) for k in self._core.db.iterator(prefix=keys.ACL, include_value=False)]
