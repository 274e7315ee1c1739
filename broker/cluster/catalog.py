"""The cluster's catalog beside its topics (issue 16, step 1): ACLs, SCRAM users, dynamic
configs (BROKER, cluster default and GROUP resources) and client quotas are the cluster's, as
Kafka keeps them in its metadata, whichever broker took the change (``metadata.view``:
``acls/``, ``users/``, ``configs/``, ``quotas/``). A topic's configs go with its placement
(broker/cluster/topics.py).

Rules:
- A change made on this broker (CreateAcls, DeleteAcls, AlterUserScramCredentials,
  AlterConfigs of a broker or group, AlterClientQuotas, SQL GRANT / REVOKE / CREATE USER) is
  written to its store as on one node, and the store tells this module (its ``observer``),
  which writes it to etcd at once, in order (``broker/cluster/outbox.py``); until etcd has it,
  it is pending and retried at every round.
- A broker's first round in a cluster it never joined (its store names no cluster, or another
  one) adds what it holds to the cluster's (nodes provisioned alike before they form a cluster
  keep their users), then — once etcd has it — records the cluster's id in its store.
- After every later round that read etcd, while nothing is pending, this broker's store
  becomes etcd's (``apply``) and the parts that keep them in memory take them again (the
  authorizer, the broker and group configs, the quotas): what another broker added is added
  here, what it removed is removed — so a revoked ACL or a deleted user is gone everywhere, and
  never comes back from a member that was down meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tmqgate.broker.cluster.outbox import Outbox
from tmqgate.broker.metadata.view import (
    acl_entry,
    acl_from,
    config_entry,
    config_from,
    quota_entry,
    quota_from,
    user_from,
    user_key,
    user_value,
)
from tmqgate.storage.users import ScramCredential

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.storage import Store
    from tmqgate.storage.acls import AclRecord

log = logging.getLogger("tmqgate.cluster")
Change = tuple[str, str | None]  # an etcd key and its value (None: deleted)


def _credential(c: ScramCredential) -> str:
    return user_value(c.salt, c.iterations, c.stored_key, c.server_key)


class SharedCatalog:
    """See the module docstring. ``reloaded``: called after the store took the cluster's
    (the broker's parts that keep ACLs, configs or quotas in memory read them again).
    Its ``*_changed`` observe the store's catalog tables (the changes made here, published),
    ``apply`` runs after each read of etcd (broker/cluster/roles.py subscribes them)."""

    def __init__(self, membership: Membership, store: Store, reloaded: list[Callable[[], None]]) -> None:
        self._membership = membership
        self._store = store
        self._reloaded = reloaded
        self._outbox: Outbox[Change] = Outbox(membership.write, "catalog changes", batch=1 << 30,
                                              drained=self._written, into=membership.outboxes)
        self._applied: tuple[dict[str, str], ...] | None = None  # etcd's, as last applied
        self._joining: str | None = None  # the cluster this broker's own catalog is being added to

    # changes made here -----------------------------------------------------------------------

    def acls_changed(self, added: list[AclRecord], removed: list[AclRecord]) -> None:
        self._publish([acl_entry(a) for a in added] + [(acl_entry(a)[0], None) for a in removed])

    def user_changed(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        self._publish([(user_key(user, mechanism), None if credential is None else _credential(credential))])

    def configs_changed(self, changed: list[tuple[tuple[int, str], dict[str, str]]]) -> None:
        self._publish([(key, value if values else None) for resource, values in changed
                       for key, value in (config_entry(resource, values),)])

    def quotas_changed(self, changed: list[tuple[Any, dict[str, float]]]) -> None:
        self._publish([(key, value if values else None) for entity, values in changed
                       for key, value in (quota_entry(entity, values),)])

    def _publish(self, changes: list[Change]) -> None:
        self._outbox.add(changes)

    async def _written(self) -> None:
        """Etcd has every change made here."""
        if self._joining is not None:  # what it held is the cluster's now
            self._store.set_joined_cluster(self._joining)
            self._joining = None
        await self._membership.refresh()

    def _held(self) -> list[Change]:
        """This broker's whole catalog, as etcd keeps it."""
        store = self._store
        held: list[Change] = [acl_entry(a) for a in store.acls.load()]
        held += [(user_key(u, m), _credential(c)) for u, ms in store.users.scram_users().items() for m, c in ms.items()]
        held += [config_entry(r, v) for r, v in store.dynamic_configs.load().items()]
        held += [quota_entry(e, v) for e, v in store.client_quotas.load().items()]
        return held

    # the cluster's, applied here -------------------------------------------------------------

    def apply(self) -> None:
        """Make this broker's catalog etcd's (see the module docstring)."""
        m = self._membership
        if m.cluster_id is not None and self._joining is None and self._store.joined_cluster() != m.cluster_id:
            self._joining = m.cluster_id
            self._publish(self._held())
            return
        if self._outbox.pending or self._joining is not None:
            self._outbox.kick(force=True)
            return
        seen = (m.acls, m.users, m.configs, m.quotas)
        if self._applied == seen:
            return
        changed = self._apply_acls(m.acls) | self._apply_users(m.users)
        changed |= self._apply_configs(m.configs) | self._apply_quotas(m.quotas)
        self._applied = tuple(dict(d) for d in seen)
        if changed:
            for reload in self._reloaded:
                reload()

    def _parsed(self, entries: dict[str, str], parse: Callable[[str, str], Any]) -> list[Any]:
        out = []
        for key, value in entries.items():
            try:
                out.append(parse(key, value))
            except (ValueError, KeyError, TypeError):
                log.warning("cluster: ignoring the unreadable etcd key %s", key)
        return out

    def _apply_acls(self, entries: dict[str, str]) -> bool:
        wanted = set(self._parsed(entries, lambda _k, v: acl_from(v)))
        held = set(self._store.acls.load())
        if wanted == held:
            return False
        self._store.acls.update(add=wanted - held, remove=held - wanted, observed=False)
        return True

    def _apply_users(self, entries: dict[str, str]) -> bool:
        wanted = {(u, m): ScramCredential(salt, it, stored, server)
                  for u, m, salt, it, stored, server in self._parsed(entries, user_from)}
        users = self._store.users
        held = {(u, m): c for u, ms in users.scram_users().items() for m, c in ms.items()}
        if wanted == held:
            return False
        for (user, mechanism), credential in wanted.items():
            if held.get((user, mechanism)) != credential:
                users.put_scram(user, mechanism, credential, observed=False)
        for user, mechanism in held.keys() - wanted.keys():
            users.delete_scram(user, mechanism, observed=False)
        return True

    def _apply_configs(self, entries: dict[str, str]) -> bool:
        return _replace_values(self._store.dynamic_configs, dict(self._parsed(entries, config_from)))

    def _apply_quotas(self, entries: dict[str, str]) -> bool:
        return _replace_values(self._store.client_quotas, dict(self._parsed(entries, lambda _k, v: quota_from(v))))


def _replace_values(part: Any, wanted: dict[Any, Any]) -> bool:
    """Make a store part keeping values per resource (dynamic configs, client quotas) hold
    ``wanted``; whether it changed."""
    held = part.load()
    if wanted == held:
        return False
    part.write([(r, wanted.get(r, {})) for r in wanted.keys() | held.keys() if wanted.get(r, {}) != held.get(r, {})],
               observed=False)
    return True
