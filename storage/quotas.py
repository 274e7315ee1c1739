"""Client quotas: the values set on each quota entity (Kafka's ClientQuotaRecord state).

Why here: they must survive a restart, and an AlterClientQuotas request is applied all at
once (Kafka's controller writes its records atomically), so one request is one WriteBatch.
The values are opaque here (validation and enforcement are the broker's, ``broker.ops.quotas``);
the whole set is small and read once at start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from tmqgate.storage import keys
from tmqgate.storage.keys import QuotaEntityKey

if TYPE_CHECKING:
    from tmqgate.storage.core import Core


class ClientQuotas:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        #: told of every change written (on a cluster: broker/cluster/catalog.py publishes it),
        #: not of one applied from the cluster (``observed=False``)
        self.observers: list[Callable[[list[tuple[QuotaEntityKey, dict[str, float]]]], None]] = []

    def load(self) -> dict[QuotaEntityKey, dict[str, float]]:
        """Every entity with at least one quota value."""
        out: dict[QuotaEntityKey, dict[str, float]] = {}
        for key, value in self._core.db.iterator(prefix=keys.QUOTA):
            values = json.loads(value)
            if values:
                out[keys.parse_quota_key(key)] = {k: float(v) for k, v in values.items()}
        return out

    def write(self, entities: Iterable[tuple[QuotaEntityKey, Mapping[str, float]]], *, observed: bool = True) -> None:
        """Replace the values of the given entities in one synced WriteBatch (an empty mapping
        removes the entity)."""
        changed = [(entity, dict(values)) for entity, values in entities]
        wb = self._core.batch(sync=True)
        for entity, values in changed:
            key = keys.quota_key(entity)
            if values:
                wb.put(key, json.dumps(dict(sorted(values.items()))).encode())
            else:
                wb.delete(key)
        if changed:
            self._core.write(wb)
            if observed:
                for observer in self.observers:
                    observer(changed)
