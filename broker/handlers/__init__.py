"""Kafka API handlers; importing this package registers them in `API_TABLE` (broker/apis.py
describes handlers, their contexts and how the server binds them)."""

from tmqgate.broker.apis import API_TABLE
from tmqgate.broker.handlers import (  # noqa: F401
    acls,
    admin,
    configs,
    elections,
    fetch,
    groups,
    leader_epochs,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    quorum,
    quotas,
    reassignments,
    sasl,
    share,
    transactions,
    txn_markers,
)

__all__ = ["API_TABLE"]
