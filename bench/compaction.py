"""Compacted topics: the log cleaner of tmqgate and of Apache Kafka side by side in one run:
`python -m bench.compaction [--keys 1000] [--rounds 200] [--value-size 100] [--brokers tmqgate,kafka]`.

Each broker is started once with its cleaner polling every 200 ms (tmqgate's
`log_cleaner_backoff_ms`, Kafka's `log.cleaner.backoff.ms`; tmqgate with bench/run.py's
settings, Kafka with run.py's heap and full JIT). On each, a 1-partition topic with
`cleanup.policy=compact`, `segment.ms=1000`, `segment.bytes=1048576` (Kafka's smallest),
`min.cleanable.dirty.ratio=0.01`, `min.compaction.lag.ms=0` gets `--rounds` rounds of one
update of every one of `--keys` keys (values of `--value-size` bytes; confluent-kafka,
`linger.ms=5`, acks=all) while its cleanup.policy is still `delete` (nothing cleaned while
producing), then, 1.2 s later, one record that rolls the head (Kafka's active segment); then
the policy is set to `compact` (IncrementalAlterConfigs), and from there the clock runs until a consumer reading from
the beginning finds the last round's first record first — every older update cleaned away
(polled every 200 ms with one Fetch). Reported: records before and after (a full read
afterwards), the bytes the cleaning had to go through (the records' keys and values as
produced) per second of that time, and the broker's CPU seconds over it (utime + stime from
/proc), with the tmqgate / Kafka ratios. Results: `compaction_results.json` and the section
"Compaction" of RESULTS.md (replaced in place). Nothing asserts timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.procstats import cpu_seconds, uptime
from bench.run import KAFKA_HEAP_OPTS, TMQGATE_CONFIG, log
from bench.security_bench import splice

BENCH_DIR = Path(__file__).resolve().parent
SECTION = "## Compaction"
BACKOFF_MS = 200
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "1000", "segment.bytes": "1048576",
                "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}


@dataclass
class Started:
    name: str
    bootstrap: str
    pid: int
    stop: Any


def start_tmqgate(workdir: Path) -> Started:
    from compat_tests.brokers import TmqgateProcess

    proc = TmqgateProcess(workdir, config={**TMQGATE_CONFIG, "log_cleaner_backoff_ms": BACKOFF_MS},
                          ready_timeout=120)
    proc.start()
    assert proc.proc is not None
    return Started("tmqgate", proc.bootstrap, proc.proc.pid, proc.stop)


def start_kafka(workdir: Path) -> Started:
    from compat_tests import kafka_ref

    ref = kafka_ref.start_reference_kafka(workdir, heap_opts=KAFKA_HEAP_OPTS, jvm_opts=kafka_ref.FULL_JIT_JVM_OPTS,
                                          ready_timeout=240,
                                          extra_config={"log.cleaner.backoff.ms": str(BACKOFF_MS)})
    return Started("kafka", ref.bootstrap, ref.pid, ref.stop)


STARTERS = {"tmqgate": start_tmqgate, "kafka": start_kafka}


def first_offset(bootstrap: str, topic: str) -> int:
    """The offset of the first record a consumer reading from the beginning gets."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-first", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 65536})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                return int(msg.offset())
        return -1
    finally:
        c.close()


def count_all(bootstrap: str, topic: str, high: int) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        n = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            n += 1
            if msg.offset() >= high - 1:
                return n
        return -1
    finally:
        c.close()


def measure(broker: Started, keys: int, rounds: int, value_size: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    topic = f"compact-bench-{os.getpid()}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # Written with cleanup.policy=delete (no cleaning while producing), then switched to compact:
    # the whole log is cleaned in one go, as after a long pause of the cleaner.
    admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIG, "cleanup.policy": "delete"})]
                        )[topic].result(60)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"v" * value_size
    produced_bytes = 0
    for _ in range(rounds):
        for k in range(keys):
            key = b"key-%06d" % k
            producer.produce(topic, value, key, partition=0)
            produced_bytes += len(key) + len(value)
            if len(producer) > 50_000:
                producer.poll(0.01)
        producer.flush(120)
    last_round_first = (rounds - 1) * keys
    time.sleep(1.2)  # past segment.ms: the next record rolls the head
    offsets: list[int] = []
    producer.produce(topic, b"roll", b"roll", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    producer.flush(60)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    cpu0 = cpu_seconds(broker.pid) or 0.0
    t0 = time.perf_counter()
    admin.incremental_alter_configs([resource])[resource].result(60)
    while True:
        first = first_offset(broker.bootstrap, topic)
        if first >= last_round_first:
            break
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"not compacted after 600 s (first offset {first})")
        time.sleep(BACKOFF_MS / 1000)
    seconds = time.perf_counter() - t0
    cpu = (cpu_seconds(broker.pid) or 0.0) - cpu0
    high = offsets[0] + 1
    after = count_all(broker.bootstrap, topic, high)
    return {"records_before": rounds * keys + 1, "records_after": after, "bytes": produced_bytes,
            "seconds": seconds, "bytes_per_s": produced_bytes / seconds, "cpu_s": cpu}


def markdown(res: dict[str, Any]) -> str:
    b = res["brokers"]
    lines = [SECTION, "",
             f"`{res['command']}` — {res['started']}; {res['keys']} keys × {res['rounds']} updates of "
             f"{res['value_size']}-byte values. Written by `bench/compaction.py` (its docstring has the method). "
             f"Single machine, 2 cores shared with the client and other work; `uptime` at start: "
             f"{res['uptime_start']}; at the end: {res['uptime_end']}.", "",
             "| broker | records before | records after | bytes to clean | time to compacted s | "
             "MB/s cleaned | broker CPU s |",
             "|---|---|---|---|---|---|---|"]
    for name, r in b.items():
        if "errors" in r:
            lines.append(f"| {name} | error: {r['errors']} | | | | | |")
            continue
        lines.append(f"| {name} | {r['records_before']:,} | {r['records_after']:,} | {r['bytes']:,} | "
                     f"{r['seconds']:.2f} | {r['bytes_per_s'] / 1e6:.1f} | {r['cpu_s']:.2f} |")
    t, k = b.get("tmqgate", {}), b.get("kafka", {})
    if "seconds" in t and "seconds" in k:
        lines += ["", "tmqgate / Kafka (> 1 favours tmqgate): bytes cleaned per second "
                  f"{t['bytes_per_s'] / k['bytes_per_s']:.2f}; broker CPU "
                  f"{k['cpu_s'] / t['cpu_s']:.2f} (Kafka's / tmqgate's)." if t["cpu_s"] else ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--brokers", default="tmqgate,kafka")
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    parser.add_argument("--no-results-md", action="store_true", help="leave RESULTS.md alone")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tmqgate-compactbench-"))
    res: dict[str, Any] = {"command": "python -m bench.compaction " + " ".join(argv or sys.argv[1:]),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "keys": args.keys,
                           "rounds": args.rounds, "value_size": args.value_size, "uptime_start": uptime(),
                           "brokers": {}}
    try:
        for name in args.brokers.split(","):
            log(f"starting {name}")
            try:
                broker = STARTERS[name](workdir / name)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other broker
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"start": f"{type(exc).__name__}: {exc}"}}
                continue
            try:
                res["brokers"][name] = measure(broker, args.keys, args.rounds, args.value_size)
                log(f"{name}: {res['brokers'][name]}")
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"run": f"{type(exc).__name__}: {exc}"}}
            finally:
                broker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res["uptime_end"] = uptime()
    (args.out / "compaction_results.json").write_text(json.dumps(res, indent=1) + "\n")
    section = markdown(res)
    if not args.no_results_md:
        splice(args.out / "RESULTS.md", section, SECTION)
    print(section)
    return 0 if all("errors" not in r for r in res["brokers"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
