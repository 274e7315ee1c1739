"""Transactions end to end, tmqgate and Apache Kafka side by side in one run:
`python -m bench.transactions_e2e [--records N] [--per-txn 100] [--brokers tmqgate,kafka]`.

(`bench/txn_bench.py` measures the transactional data plane inside storage; this one goes
over the wire, the way a Kafka user measures it.)  Each broker is started once (tmqgate with
bench/run.py's settings; the reference Kafka with run.py's JVM settings, formatted at
transaction.version=1 as tmqgate speaks it, compat_tests/txn_helpers.py), then on each, into
a fresh 4-partition topic per workload:

- *baseline*: a confluent-kafka idempotent producer (acks=all, `batch.size=65536 linger.ms=5`,
  the perf tool's settings in bench/workloads.py) sends N records of 1 KiB and flushes; then
  kafka-consumer-perf-test reads them (read_uncommitted);
- *transactional*: the same producer with a `transactional.id` sends the same N records in
  transactions of `--per-txn` records (begin, produce, commit_transaction, which waits for
  the commit); then kafka-consumer-perf-test reads them with `isolation.level=read_committed`.

The producer is confluent-kafka because kafka-producer-perf-test cuts transactions by time
(`--transaction-duration-ms`), not by record count.  An unmeasured warm-up (`--warmup` records
through both producers and a read_committed consumer) comes first on each broker.  Records/s and MB/s (MiB, as the perf
tools count) for each, the commit latency, the broker's CPU per record, and the tmqgate/Kafka
ratios.  Results: `transactions_results.json` and the section "Transactions" of RESULTS.md
(replaced in place).  Nothing asserts timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report, workloads
from bench.procstats import ResourceSampler, uptime
from bench.run import KAFKA_HEAP_OPTS, TMQGATE_CONFIG, log
from bench.security_bench import splice

BENCH_DIR = Path(__file__).resolve().parent
SECTION = "## Transactions"
PARTITIONS = 4
RECORD_SIZE = 1024
MIB = 1024 * 1024
WORKLOADS = ("baseline", "transactional")


@dataclass
class Started:
    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]


def start_tmqgate(workdir: Path) -> Started:
    from compat_tests.brokers import TmqgateProcess

    proc = TmqgateProcess(workdir, config=TMQGATE_CONFIG, ready_timeout=120)
    proc.start()
    assert proc.proc is not None
    return Started("tmqgate", proc.bootstrap, proc.proc.pid, proc.stop)


def start_kafka(workdir: Path) -> Started:
    from compat_tests import kafka_ref
    from compat_tests.txn_helpers import TRANSACTION_VERSION

    ref = kafka_ref.start_reference_kafka(workdir, heap_opts=KAFKA_HEAP_OPTS, jvm_opts=kafka_ref.FULL_JIT_JVM_OPTS,
                                          ready_timeout=240, features={"transaction.version": TRANSACTION_VERSION})
    return Started("kafka", ref.bootstrap, ref.pid, ref.stop)


STARTERS = {"tmqgate": start_tmqgate, "kafka": start_kafka}


def produce(bootstrap: str, topic: str, records: int, per_txn: int | None) -> dict[str, Any]:
    """N records of 1 KiB, in transactions of `per_txn` records (None: no transactions, one flush)."""
    from confluent_kafka import KafkaException, Producer

    failed: list[str] = []
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        else:
            failed.append(str(err))

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": int(workloads.PRODUCER_PROPS["linger.ms"]),
                            "batch.size": int(workloads.PRODUCER_PROPS["batch.size"]),
                            "on_delivery": on_delivery}
    if per_txn:
        conf["transactional.id"] = workloads.unique("bench-txn")
    producer = Producer(conf)
    payload = os.urandom(RECORD_SIZE)
    commits: list[float] = []
    if per_txn:
        producer.init_transactions(60)
    producer.list_topics(topic, timeout=30)  # connected, with the topic's metadata, before the clock starts
    t0 = time.perf_counter()
    step = per_txn or records
    for start in range(0, records, step):
        if per_txn:
            producer.begin_transaction()
        for _ in range(min(step, records - start)):
            while True:
                try:
                    producer.produce(topic, payload)
                    break
                except BufferError:
                    producer.poll(0.01)
        if per_txn:
            c0 = time.perf_counter()
            try:
                producer.commit_transaction(60)
            except KafkaException as exc:
                raise workloads.WorkloadError(f"commit_transaction failed: {exc}") from exc
            commits.append((time.perf_counter() - c0) * 1000)
    producer.flush(60)
    elapsed = time.perf_counter() - t0
    if failed or delivered[0] != records:
        raise workloads.WorkloadError(f"{delivered[0]} of {records} delivered; errors: {failed[:3]}")
    out: dict[str, Any] = {"records": records, "seconds": elapsed, "records_per_s": records / elapsed,
                           "mb_per_s": records * RECORD_SIZE / MIB / elapsed}
    if commits:
        commits.sort()
        out.update(transactions=len(commits), commit_ms_mean=statistics.fmean(commits),
                   commit_ms_p50=workloads.percentile(commits, 50), commit_ms_p99=workloads.percentile(commits, 99))
    return out


def consume(bootstrap: str, topic: str, records: int, committed: bool, workdir: Path) -> dict[str, Any]:
    """kafka-consumer-perf-test over the topic, read_committed when `committed`."""
    config = workdir / ("read_committed.properties" if committed else "read_uncommitted.properties")
    config.write_text(f"isolation.level={'read_committed' if committed else 'read_uncommitted'}\n")
    return workloads.consumer_perf(bootstrap, topic, records, client_config=str(config))


def run_workload(broker: Started, name: str, records: int, per_txn: int, workdir: Path,
                 sample: bool = True, steps: tuple[str, ...] = ("produce", "consume")) -> dict[str, Any]:
    transactional = name == "transactional"
    topic = workloads.unique(f"txn-bench-{name}")
    workloads.create_topic(broker.bootstrap, topic, PARTITIONS)
    out: dict[str, Any] = {}
    for step in steps:
        with ResourceSampler(broker.pid) as sampler:
            if step == "produce":
                result = produce(broker.bootstrap, topic, records, per_txn if transactional else None)
            else:
                result = consume(broker.bootstrap, topic, records, transactional, workdir)
        result["broker_cpu_s"] = sampler.usage.cpu_s
        result["broker_cpu_us_per_record"] = 1e6 * sampler.usage.cpu_s / records
        result["load"] = [sampler.usage.load_min, sampler.usage.load_max]
        out[step] = result
        if sample:
            log(f"  {broker.name} {name} {step}: {result['records_per_s']:,.0f} records/s, "
                f"{result['mb_per_s']:.1f} MB/s, broker CPU {sampler.usage.cpu_s:.1f} s")
    return out


def measure(broker: Started, records: int, per_txn: int, warmup: int, workdir: Path) -> dict[str, Any]:
    if warmup:  # both producers, and a read_committed consumer (one JVM start fewer than all four)
        run_workload(broker, "baseline", warmup, per_txn, workdir, sample=False, steps=("produce",))
        run_workload(broker, "transactional", warmup, per_txn, workdir, sample=False)
    return {name: run_workload(broker, name, records, per_txn, workdir) for name in WORKLOADS}


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "—"


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section."""
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['total_s']:.0f} s; {res['records']:,} records of 1 KiB per "
          f"workload, in transactions of {res['per_txn']} records, after {res['warmup']:,} unmeasured records "
          "through each producer and read_committed. Written by `bench/transactions_e2e.py`. Producer: confluent-kafka "
          f"{res['client']}, idempotent, acks=all, `batch.size=65536 linger.ms=5`, 4 partitions; *transactional*: "
          "begin, 100 × produce, `commit_transaction()` (waits for the commit), repeated; *baseline*: the same "
          "producer without a transactional.id, one flush at the end. Consumer: kafka-consumer-perf-test over "
          "the same records, `isolation.level=read_committed` for the transactional topic, read_uncommitted "
          "for the baseline (records/s and MB/s include the group join, *fetch* excludes it). "
          "The reference Kafka is formatted at "
          "transaction.version=1, the protocol tmqgate speaks. Broker CPU: its user + system seconds during "
          "the step, per record. Single machine, 2 cores shared with the clients and other work; "
          f"`uptime` at start: {res['uptime_start']}; at the end: {res['uptime_end']}.", ""]
    rows = []
    brokers = res["brokers"]
    for name, b in brokers.items():
        if "errors" in b:
            rows.append([name, "failed: " + "; ".join(b["errors"].values()), "", "", "", "", "", "", ""])
            continue
        for wl in WORKLOADS:
            p, c = b[wl]["produce"], b[wl]["consume"]
            commit = f"{p['commit_ms_p50']:.1f} / {p['commit_ms_p99']:.1f}" if "commit_ms_p50" in p else "—"
            rows.append([name, wl, f"{p['records_per_s']:,.0f}", f"{p['mb_per_s']:.1f}", commit,
                         f"{c['records_per_s']:,.0f}", f"{c['mb_per_s']:.1f}", f"{c['fetch_records_per_s']:,.0f}",
                         f"{p['broker_cpu_us_per_record']:.1f} / {c['broker_cpu_us_per_record']:.1f}"])
    md += report._table(["broker", "workload", "produce records/s", "produce MB/s", "commit p50 / p99 ms",
                         "consume records/s", "consume MB/s", "consume fetch records/s",
                         "broker CPU µs/record produced / consumed"], rows)
    ok = {n: b for n, b in brokers.items() if "errors" not in b}
    if "tmqgate" in ok and "kafka" in ok:
        t, k = ok["tmqgate"], ok["kafka"]
        md += ["", "tmqgate / Kafka (> 1 favours tmqgate):", ""]
        md += report._table(
            ["workload", "produce records/s", "consume records/s", "consume fetch records/s",
             "broker CPU per record produced"],
            [[wl, _ratio(t[wl]["produce"]["records_per_s"], k[wl]["produce"]["records_per_s"]),
              _ratio(t[wl]["consume"]["records_per_s"], k[wl]["consume"]["records_per_s"]),
              _ratio(t[wl]["consume"]["fetch_records_per_s"], k[wl]["consume"]["fetch_records_per_s"]),
              _ratio(k[wl]["produce"]["broker_cpu_us_per_record"], t[wl]["produce"]["broker_cpu_us_per_record"])
              + " (Kafka's / tmqgate's)"]
             for wl in WORKLOADS])
    if ok:
        md += ["", "Transactional / baseline on the same broker (what transactions cost):", ""]
        md += report._table(
            ["broker", "produce", "consume", "consume fetch"],
            [[n, _ratio(b["transactional"]["produce"]["records_per_s"], b["baseline"]["produce"]["records_per_s"]),
              _ratio(b["transactional"]["consume"]["records_per_s"], b["baseline"]["consume"]["records_per_s"]),
              _ratio(b["transactional"]["consume"]["fetch_records_per_s"],
                     b["baseline"]["consume"]["fetch_records_per_s"])]
             for n, b in ok.items()])
    notes = res.get("notes")
    if notes:
        md += ["", *notes]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transactions_e2e",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per workload")
    parser.add_argument("--per-txn", type=int, default=100, help="records per transaction")
    parser.add_argument("--warmup", type=int, default=10_000, help="unmeasured records through each producer first")
    parser.add_argument("--brokers", default="tmqgate,kafka")
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    parser.add_argument("--no-results-md", action="store_true", help="leave RESULTS.md alone")
    args = parser.parse_args(argv)
    import confluent_kafka

    workdir = Path(tempfile.mkdtemp(prefix="tmqgate-txnbench-"))
    res: dict[str, Any] = {"command": "python -m bench.transactions_e2e " + " ".join(argv or sys.argv[1:]),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "records": args.records,
                           "per_txn": args.per_txn, "warmup": args.warmup, "uptime_start": uptime(),
                           "client": f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})",
                           "brokers": {}}
    t0 = time.perf_counter()
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
                res["brokers"][name] = measure(broker, args.records, args.per_txn, args.warmup, workdir)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"run": f"{type(exc).__name__}: {exc}"}}
            finally:
                broker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res["total_s"] = time.perf_counter() - t0
    res["uptime_end"] = uptime()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transactions_results.json").write_text(json.dumps(res, indent=1) + "\n")
    section = markdown(res)
    if not args.no_results_md:
        splice(args.out / "RESULTS.md", section, SECTION)
    print(section)
    return 0 if all("errors" not in b for b in res["brokers"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
