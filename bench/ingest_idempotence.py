"""What idempotence costs a database topic's Produce (issue 14, point 4).

Run: ``python -m bench.ingest_idempotence [--batches 400] [--lines 100] [--rounds 4]`` — builds a broker's
store and SQL executor in this process (no network) and times, per batch of ``--lines`` lines
of line protocol in one record (one supertable, 16 child tables, one vnode, wal_level 1):

* ``plain``: ``ingest`` of a batch with no producer id (what a non-idempotent producer costs);
* ``idempotent``: what Produce does for an idempotent producer's batch — the window lookup,
  ``check_sequence``, then ``ingest`` storing the window in the rows' WriteBatch;
* ``retry``: a retried batch (one of the last five: the window Kafka keeps), answered from the
  window (lookup and check only; nothing parsed or written).

CPU seconds of the calling thread per batch (``time.thread_time``: stable on a shared, loaded
machine where wall time is mostly waiting; LevelDB's background compaction is not in it),
best of ``--rounds`` rounds (fresh database each round; the two
writing modes take turns going first).

Measured (shared 2-core machine at load 7-9, 400 batches x 100 rows, two runs): plain
2.50-2.75 ms, idempotent 2.57-2.80 ms (the same within the noise: one cached window lookup
and one key more in the rows' WriteBatch), retry 3.4-4.0 us.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.tdengine import ingest
from tmqgate.protocol.records import build_batch, iter_batches
from tmqgate.storage.producers import ProducerAppend, check_sequence

TS0 = 1_700_000_000_000


def batches(n: int, lines: int, producer_id: int) -> list[bytes]:
    out = []
    for b in range(n):
        text = "\n".join(f"st,g=g{(b * lines + j) % 16} v={j}.5,k={j}i {TS0 + b * lines + j}" for j in range(lines))
        out.append(build_batch([(None, text.encode(), [("tmq.precision", b"ms")])],
                               producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                               base_sequence=b if producer_id >= 0 else -1))
    return out


def run(broker: Broker, db: str, data: list[bytes], mode: str) -> float:
    store, executor = broker.store, broker.executor
    start = time.thread_time()
    for batch in data:
        h = next(iter_batches(batch))
        if h.producer_id < 0:
            ingest(executor, db, 0, batch)
            continue
        window = store.producer_window(db, 0, h.producer_id)
        verdict = check_sequence(window, h.producer_epoch, h.base_sequence, h.record_count)
        if verdict.duplicate_of is not None:
            continue
        assert mode == "idempotent", verdict
        ingest(executor, db, 0, batch, None,
               ProducerAppend(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count, window))
    return (time.thread_time() - start) / len(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    plain = batches(args.batches, args.lines, -1)
    idem = batches(args.batches, args.lines, 7)
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=tmp))
        try:
            retries = (idem[-5:] * len(idem))[:len(idem)]
            for r in range(args.rounds):
                # the two writing modes in turn first: LevelDB's compactions after one round of
                # writes slow whatever comes next
                order = [("plain", plain), ("idempotent", idem)]
                for mode, data in (*(order if r % 2 == 0 else order[::-1]), ("retry", retries)):
                    db = f"{'i' if mode == 'retry' else mode[0]}{r}"
                    if mode != "retry":
                        broker.executor.execute(f"CREATE DATABASE {db} VGROUPS 1")
                        ingest(broker.executor, db, 0, batches(1, 1, -1)[0])  # schema made before timing
                    best[mode] = min(best.get(mode, float("inf")), run(broker, db, data, mode))
        finally:
            broker.store.close()
    for mode, sec in best.items():
        print(f"{mode:>10}: {sec * 1e6:9.1f} us CPU per batch of {args.lines} rows")


if __name__ == "__main__":
    main()
