"""`tmqgate serve --workers N` against one broker (issue 28): aggregate produce throughput with
P producer processes, `python -m bench.workers_bench [--workers 1,2] [--producers 2] [--seconds 10]
[--clients confluent-kafka,franz-go]`.

For each worker count: a fresh `tmqgate serve --workers N` (bench/run.py's settings), a topic
of the same partitions for every N (`--partitions`, default 4 per worker of the largest N: the
same workload served; leaders spread over the workers), then P producer processes of each
client in `--clients`, each sending 1 KiB random values round-robin over the partitions
(acks=1, linger.ms=5, batches up to 128 KiB, uncompressed, as ../shared/bench/scale measures)
for `--seconds` after a warm-up: confluent-kafka (librdkafka, a Python call per record) or
franz-go (the suite's Go program, compat_tests/go, mode `produce`; about a quarter of the
former's CPU per record, so more of a 2-core machine is left to the brokers).

The figure is the records the topic gained in the window (the sum of its partitions' high
watermarks, asked of their leaders, at its start and end). The producers keep no per-record
Python callback: on a 2-core machine their CPU is taken from the brokers, and a Python callback
per record cost them as much as the broker's own work per record. Also the CPU seconds over the
window of each child process of the supervisor (the workers, and multiprocessing's resource
tracker, near 0) and of the producers. Results: `workers_results.json` beside this file.
Nothing asserts timings: on a 2-core machine brokers and producers share the cores, so read it
as whether N workers use more of the machine than one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.procstats import cpu_seconds
from bench.run import TMQGATE_CONFIG
from compat_tests.go_client import go_command, go_events
from compat_tests.helpers import api_versions_ok, child_pids, free_port, wait_until

BENCH_DIR = Path(__file__).resolve().parent
VALUE = 1024
CLIENTS = ("confluent-kafka", "franz-go")


def _producer(bootstrap: str, topic: str, partitions: int, until: float) -> None:
    """Sends until the monotonic time `until` (the parent's: one clock on one machine)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 131072,
                         "queue.buffering.max.kbytes": 1048576})
    value = os.urandom(VALUE)
    i = 0
    while True:
        try:
            producer.produce(topic, value, partition=i % partitions)
            i += 1
        except BufferError:
            producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
            if time.monotonic() >= until:
                break
    producer.flush(30)


def _spin(seconds: float) -> int:
    """Rounds of a pure-Python loop done in `seconds`: a process's CPU speed, nothing shared."""
    end = time.perf_counter() + seconds
    rounds = 0
    while time.perf_counter() < end:
        for _ in range(10_000):
            pass
        rounds += 1
    return rounds


def machine_scaling(cpus: int, seconds: float = 2.0) -> float:
    """What `cpus` processes of pure CPU work do together, against one alone: `cpus` on cores
    of their own, less where they share a physical core or the host takes its share."""
    with multiprocessing.get_context("spawn").Pool(cpus) as pool:
        pool.map(_spin, [0.5] * cpus)  # every process started (imports done) before measuring
        one = pool.apply(_spin, (seconds,))
        together = pool.map(_spin, [seconds] * cpus)
    return sum(together) / one


def _stored(consumer: Any, topic: str, partitions: int) -> int:
    """The topic's records: its partitions' high watermarks, summed (each asked of its leader)."""
    from confluent_kafka import TopicPartition

    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))


def _start_producers(client: str, count: int, bootstrap: str, topic: str, partitions: int,
                     seconds: float) -> list[Any]:
    """`count` producer processes of `client` sending for `seconds` from now; each has `.pid`
    and `.join(timeout)`."""
    if client == "franz-go":
        return [_GoProducer(bootstrap, topic, seconds) for _ in range(count)]
    ctx = multiprocessing.get_context("spawn")
    until = time.monotonic() + seconds
    procs = [ctx.Process(target=_producer, args=(bootstrap, topic, partitions, until)) for _ in range(count)]
    for p in procs:
        p.start()
    return procs


class _GoProducer:
    """compat_tests/go's program in mode `produce`; `failed`: the records it could not send."""

    def __init__(self, bootstrap: str, topic: str, seconds: float) -> None:
        self.proc = subprocess.Popen(go_command("produce", bootstrap, topic=topic, seconds=seconds),
                                     stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.failed = 0

    def join(self, timeout: float) -> None:
        out, _ = self.proc.communicate(timeout=timeout)
        events = go_events(out)
        produced = [e for e in events if e["event"] == "produced"]
        if self.proc.returncode or not produced:
            raise RuntimeError(f"the franz-go producer exited {self.proc.returncode}: {events}")
        self.failed = produced[0]["failed"]


def run(workers: int, producers: int, seconds: float, workdir: Path, partitions: int,
        client: str) -> dict[str, Any]:
    """One cell: N workers, P producers of `client`, a topic of `partitions`."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    port, http = free_port(workers), free_port(workers)  # worker i on each + i
    config = workdir / "tmqgate.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in TMQGATE_CONFIG.items()))
    log = open(workdir / "serve.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from tmqgate.broker.cli import main; sys.exit(main())",
                             "serve", "--workers", str(workers), "--listen", f"127.0.0.1:{port}",
                             "--http", f"127.0.0.1:{http}", "--data-dir", str(workdir / "data"),
                             "--config", str(config), "--log-level", "WARNING"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(workers))
        for i in range(workers):
            wait_until(lambda i=i: api_versions_ok(f"127.0.0.1:{port + i}"), 60, 0.2, f"worker {i} ready")
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(60)
        time.sleep(2)  # every worker has the placement
        pids = child_pids(proc.pid) if workers > 1 else [proc.pid]
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
        # start-up and warm-up, the window, then stop
        procs = _start_producers(client, producers, bootstrap, topic, partitions, 4.0 + seconds)
        time.sleep(4.0)
        cpu0 = [cpu_seconds(pid) or 0.0 for pid in pids + [p.pid for p in procs]]
        stored0, t0 = _stored(consumer, topic, partitions), time.monotonic()
        time.sleep(seconds)
        stored1, t1 = _stored(consumer, topic, partitions), time.monotonic()
        cpu1 = [cpu_seconds(pid) or 0.0 for pid in pids + [p.pid for p in procs]]
        for p in procs:
            p.join(60)
        consumer.close()
        records, window = stored1 - stored0, t1 - t0
        cpu = [round(b - a, 2) for a, b in zip(cpu0, cpu1, strict=True)]
        failed = sum(getattr(p, "failed", 0) for p in procs)
        return {"client": client, "workers": workers, "producers": producers, "partitions": partitions,
                "seconds": round(window, 2), "failed": failed,
                "records": records,
                "records_per_s": round(records / window), "mib_per_s": round(records * VALUE / window / 2**20, 1),
                "worker_cpu_s": cpu[:len(pids)], "producer_cpu_s": cpu[len(pids):]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


SECTION = "## Scaling: `tmqgate serve --workers N`"


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section (bench/run.py splices it in from workers_results.json)."""
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['cpus']} CPUs. Written by `bench/workers_bench.py`: "
          "for each worker count a fresh `tmqgate serve --workers N` (bench/run.py's settings), one topic of "
          f"{res['results'][0].get('partitions', '4 per worker')} partitions for every worker count (the same "
          "workload; leaders spread over the workers), P producer processes of one client sending 1 KiB values "
          "(acks=1, linger 5 ms, batches up to 128 KiB, uncompressed, no per-record Python callback) for the "
          "window after a warm-up: confluent-kafka (librdkafka under a Python call per record) or franz-go (Go: "
          "compat_tests/go, mode `produce`); "
          "records/s is what the topic gained in the window. CPU seconds over the window: the workers' (each), "
          "the producers' (all). On this "
          "machine brokers and producers share the cores: read it as whether N workers use more of the machine "
          "than one; ×1 worker is the ratio to one worker with as many producers of the same client. "
          f"Each cell is the median of {res.get('rounds', 1)} round(s), the grid run round after round "
          "(every round's records/s in the last column).", ""]
    rows = []
    base = {_cell(r, 1): r["records_per_s"] for r in res["results"] if r["workers"] == 1}
    for r in res["results"]:
        one = base.get(_cell(r, 1))
        rows.append([_cell(r)[0], str(r["workers"]), str(r["producers"]),
                     f"{r['records_per_s']:,}", f"{r['mib_per_s']:.1f}",
                     f"{r['records_per_s'] / one:.2f}" if one else "–",
                     " + ".join(f"{c:.1f}" for c in r["worker_cpu_s"] if c >= 0.05),
                     f"{sum(r.get('producer_cpu_s', [])):.1f}",
                     ", ".join(f"{x:,}" for x in r.get("rounds", [r["records_per_s"]]))])
    md += ["| client | workers | producers | records/s | MiB/s | ×1 worker | worker CPU s | producers' CPU s "
           "| rounds |",
           "|---|---|---|---|---|---|---|---|---|"]
    md += ["| " + " | ".join(row) + " |" for row in rows]
    tops = res.get("ceilings") or {}
    if tops:
        md += ["", f"What these cores allow: one worker with {res['cpus']} producers spends b CPU-µs a record and its "
               "producers p; it is bound by its one core (1 / b records/s) while the machine's cores carry at most "
               f"{res['cpus']} / (b + p): N workers can gain at most {res['cpus']}·b / (b + p) = "
               + ", ".join(f"**{top:.2f}×** with {client}" for client, top in tops.items())
               + " here. A faster worker (smaller b) or a costlier client (larger p) lowers that ceiling: on a "
               "machine where clients share the cores, the gain from more workers is bounded by what the clients "
               "leave."]
    machine = res.get("machine_scaling")
    if machine:
        md += ["", f"The machine itself, measured before each round: {res['cpus']} processes of a pure-Python loop did "
               f"**{statistics.median(machine):.2f}×** one's work (median; rounds "
               + ", ".join(f"{m:.2f}" for m in machine) + f"). Where that is under {res['cpus']}, the cores slow "
               "each other down (shared physical cores, the host's other guests), and the workers' ceiling above "
               "shrinks by the same factor."]
    return "\n".join(md) + "\n"


def _cell(r: dict[str, Any], workers: int | None = None) -> tuple[str, int, int]:
    """A result's cell of the grid (client, workers, producers); `workers` given: that count's."""
    return r["client"], r["workers"] if workers is None else workers, r["producers"]


def _median_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (client, workers, producers), in first-run order: the run with the median
    records/s, with every round's records/s beside it (`rounds`)."""
    keys = list(dict.fromkeys(_cell(r) for r in results))
    out = []
    for key in keys:
        runs = sorted((r for r in results if _cell(r) == key), key=lambda r: r["records_per_s"])
        out.append({**runs[(len(runs) - 1) // 2], "rounds": [r["records_per_s"] for r in runs]})
    return out


def ceiling(res: dict[str, Any], client: str) -> float | None:
    """What the machine allows N workers over one, from one worker's run with as many producers
    of `client` as cores: with that worker core-bound at b CPU-µs a record and the producers at
    p, the machine's `cpus` cores carry at most cpus / (b + p) records/s, against one worker's
    1 / b: cpus·b / (b + p) (None without such a run)."""
    cpus = res["cpus"]
    one = [r for r in res["results"] if _cell(r) == (client, 1, cpus)]
    if not one or not one[0]["records"]:
        return None
    b = sum(one[0]["worker_cpu_s"]) / one[0]["records"]
    p = sum(one[0]["producer_cpu_s"]) / one[0]["records"]
    return cpus * b / (b + p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--producers", default="2", help="comma-separated producer counts (each with each N)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=0,
                        help="the topic's partitions, the same for every worker count (default: 4 per worker "
                        "of the largest count), so every count serves the same workload")
    parser.add_argument("--clients", default=CLIENTS[0],
                        help=f"comma-separated producer clients, each with each cell: {', '.join(CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=3, help="the whole grid this many times, interleaved; "
                        "each cell reports its median round")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "workers_results.json")
    args = parser.parse_args(argv)
    clients = args.clients.split(",")
    if not set(clients) <= set(CLIENTS):
        parser.error(f"--clients: each of {', '.join(CLIENTS)}")
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    every = []
    machine: list[float] = []
    partitions = args.partitions or 4 * max(int(w) for w in args.workers.split(","))
    for _ in range(args.rounds):
        machine.append(round(machine_scaling(os.cpu_count() or 1), 2))
        for client in clients:
            for producers in (int(p) for p in args.producers.split(",")):
                for n in (int(w) for w in args.workers.split(",")):
                    workdir = Path(tempfile.mkdtemp(prefix=f"tmqgate-workers-{n}-"))
                    try:
                        result = run(n, producers, args.seconds, workdir, partitions, client)
                    finally:
                        shutil.rmtree(workdir, ignore_errors=True)
                    print(json.dumps(result), flush=True)
                    every.append(result)
    results = _median_runs(every)
    base = {_cell(r, 1): r["records_per_s"] or 1 for r in results if r["workers"] == 1}
    command = "python -m bench.workers_bench " + " ".join(argv if argv is not None else sys.argv[1:])
    summary = {"command": command.strip(), "started": started, "cpus": os.cpu_count(), "rounds": args.rounds,
               "results": results,
               "ratios": {f"{r['client']} {r['workers']}w/{r['producers']}p":
                          round(r["records_per_s"] / base[_cell(r, 1)], 2) for r in results if _cell(r, 1) in base}}
    summary["machine_scaling"] = machine
    summary["ceilings"] = {client: top for client in clients if (top := ceiling(summary, client)) is not None}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({**summary["ratios"], "ceilings": summary["ceilings"]}))
    return 0

if __name__ == "__main__":
    sys.exit(main())
