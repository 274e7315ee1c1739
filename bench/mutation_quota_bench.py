"""What controller_mutation_rate (broker/ops/quotas/, KIP-599) costs a CreateTopics request.

Run: ``python bench/mutation_quota_bench.py [requests]`` — in process, no broker: the quota code
a CreateTopics / CreatePartitions / DeleteTopics handler runs per request (``mutation_quota`` +
one ``record`` per topic + ``throttle_time_ms``), with a quota too high to throttle, for a
request of 1 and of 10 topics; and the path of a client no such quota applies to (others' set).
Prints µs per request (medians of several rounds).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.identity.client import ClientInfo, current_client
from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
from tmqgate.storage import Store


def _round(managers: ClientQuotaManagers, client: str, topics: int, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        quota = managers.mutation_quota(client, 7, 6)
        if quota is not None:
            for _ in range(topics):
                quota.record(1)
            quota.throttle_time_ms()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    current_client.set(ClientInfo("127.0.0.1", 1))  # the server sets it per connection
    with tempfile.TemporaryDirectory() as tmp, Store(f"{tmp}/data") as store:
        managers = ClientQuotaManagers(store, BrokerConfig())
        [r] = managers.alter([{"entity": [{"entity_type": "client-id", "entity_name": "limited"}], "ops": [
            {"key": "controller_mutation_rate", "value": 1e12, "remove": False}]}], False)
        assert r.code == 0, r
        cases = {"others' quota (none applies)": ("free", 1), "own quota, 1 topic": ("limited", 1),
                 "own quota, 10 topics": ("limited", 10)}
        results: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(7):
            for name, (client, topics) in cases.items():
                results[name].append(_round(managers, client, topics, n))
        for name, times in results.items():
            print(f"{name:32s} {statistics.median(times):6.2f} µs per request")


if __name__ == "__main__":
    main()
