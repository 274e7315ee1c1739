"""Schemaless ingestion of compressed batches: line protocol produced to a database topic.

Run: ``python -m bench.ingest_compressed [--rows 300000] [--codecs none,gzip,lz4,zstd]`` —
starts a `tmqgate serve`, and for each codec creates a database and produces ``--rows`` rows
of line protocol (100 lines per record, keyed by one of 64 child tables, acks=all) with a
confluent-kafka producer using that ``compression.type``. The records are built before the
clock starts; the figures are the wall time until every record is acknowledged and the
broker's CPU seconds over it (/proc), per codec, and the rows per broker CPU second.

``--decode`` measures instead, in this process, the part the change touches: validating a
batch and parsing its rows (``protocol.validate`` then ``sql.ingest.parse_records``) for the
same rows in batches of 100 records, with the decompressed records handed over (now) and
decompressed a second time (before), and one decompression alone (what the change saves);
CPU seconds, best of 5.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procstats import cpu_seconds
from bench.workloads import WorkloadError, sql
from compat_tests.brokers import TmqgateProcess


def records(rows: int, tables: int = 64, per_record: int = 100, seed: int = 1) -> list[tuple[bytes, bytes]]:
    rnd = random.Random(seed)
    ts0 = 1_700_000_000_000
    out = []
    for i in range(0, rows, per_record):
        t = (i // per_record) % tables
        lines = [f"st,g=g{t} v={rnd.random():.6f},k={rnd.randrange(100)}i {ts0 + i + j}"
                 for j in range(min(per_record, rows - i))]
        out.append((f"c{t}".encode(), "\n".join(lines).encode()))
    return out


def produce(bootstrap: str, topic: str, data: list[tuple[bytes, bytes]], codec: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1_000_000, "partitioner": "murmur2_random", "compression.type": codec})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for key, value in data:
        while True:
            try:
                producer.produce(topic, value, key=key, headers=[("tmq.precision", b"ms")], on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(600)
    if errors or remaining:
        raise WorkloadError(f"{codec}: {len(errors)} failed, {remaining} undelivered: {errors[:3]}")


def decode(data: list[tuple[bytes, bytes]], codecs: list[str]) -> dict[str, Any]:
    from tmqgate.broker.sql.ingest import parse_records
    from tmqgate.protocol.compression import GZIP, LZ4, NONE, ZSTD, decompress
    from tmqgate.protocol.records import build_batch, iter_batches
    from tmqgate.protocol.validate import validate_records

    ids = {"none": NONE, "gzip": GZIP, "lz4": LZ4, "zstd": ZSTD}
    out = {}
    for codec in codecs:
        batches = [build_batch([(k, v, [("tmq.precision", b"ms")], 1_700_000_000_000) for k, v in data[i:i + 100]],
                               compression=ids[codec]) for i in range(0, len(data), 100)]
        headers = [next(iter_batches(b)) for b in batches]
        timings = {}
        for mode in ("once", "twice", "decompress"):
            best = float("inf")
            for _ in range(5):
                t0 = time.process_time()
                for b, h in zip(batches, headers, strict=True):
                    if mode == "decompress":  # the work "twice" repeats: one decompression
                        if h.compression:
                            decompress(h.compression, memoryview(b)[61:h.size], 1 << 28)
                        continue
                    valid = validate_records(b, h.record_count, h.last_offset_delta, h.attributes,
                                             h.base_timestamp, h.size, 1 << 28)
                    parse_records(b, valid.records if mode == "once" else None)
                best = min(best, time.process_time() - t0)
            timings[mode] = round(best, 4)
        out[codec] = {**timings, "decompress_share_pct": round(100 * timings["decompress"] / timings["twice"], 1),
                      "batches": len(batches), "compressed_mb": round(sum(map(len, batches)) / 1e6, 2)}
        print(codec, out[codec], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--codecs", default="none,gzip,lz4,zstd")
    ap.add_argument("--decode", action="store_true")
    args = ap.parse_args()
    data = records(args.rows)
    if args.decode:
        print(json.dumps(decode(data, args.codecs.split(","))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc = TmqgateProcess(Path(tmp))
        proc.start()
        try:
            http = f"127.0.0.1:{proc.http_port}"
            results = {}
            for codec in args.codecs.split(","):
                db = f"lp_{codec}"
                sql(http, f"CREATE DATABASE {db} VGROUPS 4")
                pid = proc.proc.pid  # type: ignore[union-attr]
                cpu0, t0 = cpu_seconds(pid), time.perf_counter()
                produce(proc.bootstrap, db, data, codec)
                wall, cpu = time.perf_counter() - t0, (cpu_seconds(pid) or 0) - (cpu0 or 0)
                results[codec] = {"rows": args.rows, "wall_s": round(wall, 2), "broker_cpu_s": round(cpu, 2),
                                  "rows_per_cpu_s": round(args.rows / cpu) if cpu else None}
                print(codec, results[codec], flush=True)
            print(json.dumps(results))
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
