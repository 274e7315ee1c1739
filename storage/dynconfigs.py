"""Dynamic configs: the values set at run time on a BROKER (one node or the cluster default)
or a GROUP resource (Kafka's ConfigRecord state for those resource types).

Why here: Kafka keeps them in its metadata log so that they survive a restart and apply
before the broker serves; an AlterConfigs request is applied all at once, so one request is
one synced WriteBatch. The values are opaque strings here (validation and what they change
are the broker's: ``broker.dynamic_configs``, broker_configs and group_configs); the whole set is
small and read once at start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core

#: (Kafka ConfigResource type, resource name) — e.g. (4, "0"), (4, ""), (32, "my-group").
ConfigResourceKey = tuple[int, str]


class DynamicConfigs:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        #: told of every change written (on a cluster: broker/cluster/catalog.py publishes it),
        #: not of one applied from the cluster (``observed=False``)
        self.observers: list[Callable[[list[tuple[ConfigResourceKey, dict[str, str]]]], None]] = []

    def load(self) -> dict[ConfigResourceKey, dict[str, str]]:
        """Every resource with at least one dynamic value."""
        out: dict[ConfigResourceKey, dict[str, str]] = {}
        for key, value in self._core.db.iterator(prefix=keys.DYNCONF):
            values = json.loads(value)
            if values:
                out[keys.parse_dynconf_key(key)] = {str(k): str(v) for k, v in values.items()}
        return out

    def write(self, resources: Iterable[tuple[ConfigResourceKey, Mapping[str, str]]], *, observed: bool = True) -> None:
        """Replace the values of the given resources in one synced WriteBatch (an empty
        mapping removes the resource)."""
        changed = [(resource, dict(values)) for resource, values in resources]
        wb = self._core.batch(sync=True)
        for (rtype, name), values in changed:
            key = keys.dynconf_key(rtype, name)
            if values:
                wb.put(key, json.dumps(dict(sorted(values.items()))).encode())
            else:
                wb.delete(key)
        if changed:
            self._core.write(wb)
            if observed:
                for observer in self.observers:
                    observer(changed)
