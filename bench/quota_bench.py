"""What client quotas (broker/ops/quotas/) cost a request.

Run: ``python bench/quota_bench.py [requests]`` — an in-process broker on loopback, one raw
connection sending acks=1 Produce requests of one 1 KiB record one at a time, in three
settings interleaved over several rounds (medians):

- ``none``: no quota set anywhere (the server only reads ``quotas.active``);
- ``other``: a quota set on another client id (every request resolves its quotas: one dict
  lookup per quota kind, cached);
- ``own``: a producer_byte_rate and a request_percentage on this client id, too high to throttle
  (every request is recorded in both rates and measured).

Prints µs per request (round trip) and the µs the quota code itself took per request
(``ClientQuotaManagers.charge`` timed alone).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol.records import build_batch

sys.path.insert(0, ".")
from tests.broker_conn import Conn  # noqa: E402

CLIENT = "bench-producer"


def _alter(broker: Broker, client: str, values: dict[str, float | None]) -> None:
    [r] = broker.quotas.alter([{"entity": [{"entity_type": "client-id", "entity_name": client}], "ops": [
        {"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in values.items()]}], False)
    assert r.code == 0, r


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="quota-bench-", dir=".") as data_dir:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
        await broker.start()
        try:
            conn = await Conn.open(broker.port, client_id=CLIENT)
            batch = build_batch([(None, b"x" * 1024, [], int(time.time() * 1000))])
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
                    "topic_data": [{"name": "quota-bench", "partition_data": [{"index": 0, "records": batch}]}]}
            await conn.call(0, 9, body)  # auto-creates the topic
            charged = [0.0, 0]
            real_charge = broker.quotas.charge

            def timed_charge(*args):  # noqa: ANN002, ANN202
                t = time.perf_counter()
                try:
                    return real_charge(*args)
                finally:
                    charged[0] += time.perf_counter() - t
                    charged[1] += 1

            broker.quotas.charge = timed_charge  # type: ignore[method-assign]
            settings = {
                "none": lambda: (_alter(broker, "other", {"producer_byte_rate": None}),
                                 _alter(broker, CLIENT, {"producer_byte_rate": None, "request_percentage": None})),
                "other": lambda: _alter(broker, "other", {"producer_byte_rate": 1e12}),
                "own": lambda: (_alter(broker, "other", {"producer_byte_rate": None}),
                                _alter(broker, CLIENT, {"producer_byte_rate": 1e12, "request_percentage": 1e6})),
            }
            per_request: dict[str, list[float]] = {k: [] for k in settings}
            per_charge: dict[str, list[float]] = {k: [] for k in settings}
            for _ in range(5):
                for name, setup in settings.items():
                    setup()
                    assert broker.quotas.active == (name != "none")
                    charged[:] = [0.0, 0]
                    t = time.perf_counter()
                    for _ in range(n):
                        resp = await conn.call(0, 9, body)
                        assert resp["throttle_time_ms"] == 0
                    per_request[name].append((time.perf_counter() - t) / n * 1e6)
                    per_charge[name].append(charged[0] / n * 1e6)
            conn.close()
        finally:
            await broker.stop()
    print(f"acks=1 Produce of one 1 KiB record, {n} requests x 5 rounds (medians):")
    for name in settings:
        print(f"  {name:6s} {statistics.median(per_request[name]):7.1f} µs/request, "
              f"quota code {statistics.median(per_charge[name]):5.2f} µs/request")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000))
