"""tmqgate against Apache Kafka on the same machine: `python -m bench.run --quick|--full`.

Starts tmqgate, then the reference Apache Kafka broker (compat_tests/kafka_ref.py, 4.x from
its jars, full JIT), one after the other with their data on the same disk, and runs the same
workloads against each (see bench/workloads.py):

1. kafka-producer-perf-test, 1 KiB records into a 4-partition topic, acks=1 and acks=all
2. kafka-consumer-perf-test over the acks=1 data
3. end-to-end latency at a fixed rate (confluent-kafka pair) and with EndToEndLatency
4. tmqgate only: query topics at 10% / 90% selectivity and a database topic
5. rebalance time, classic and KIP-848 groups
6. the broker's CPU seconds and peak memory during 1 and 2

and writes RESULTS.md, results.json and results.png to --out (default bench/).  Modes:
`--smoke` (5,000 records, tmqgate only, for the smoke test), `--quick` (100,000 records and
1,000,000 query-topic rows, < 5 minutes), `--full` (1,000,000 records).  `--profile` adds a pass with py-spy attached
to tmqgate during workloads 1, 2 and 4 and writes PROFILE.md; `--profile-only` runs just that
pass (and leaves RESULTS.md alone).  Nothing here asserts timings.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import pyspy, report, workloads
from bench.procstats import ResourceSampler, Usage

BENCH_DIR = Path(__file__).resolve().parent
#: The benchmarks with a RESULTS.md section of their own (module: the stem of its results
#: file), spliced in after this one writes RESULTS.md, in this order.
SECTION_BENCHES = {"security_bench": "security", "transactions_e2e": "transactions", "workers_bench": "workers",
                   "select_bench": "select", "view_entries_bench": "view_entries", "share_bench": "share"}


@dataclass(frozen=True)
class Mode:
    name: str
    records: int
    e2e_rate: int
    e2e_seconds: float
    e2e_java_records: int
    query_rows: int
    rebalance_trials: int
    # unmeasured producer and consumer runs first: Kafka's JIT needs a few hundred thousand
    # records before its throughput and latency settle (tmqgate has no warm-up to speak of)
    warmup_records: int
    e2e_warmup_s: float
    brokers: tuple[str, ...] = ("tmqgate", "kafka")


MODES = {
    "smoke": Mode("smoke", 5_000, 200, 1.0, 0, 5_000, 1, 0, 0.5, ("tmqgate",)),
    # quick mode still reads query topics over the 1,000,000 rows the issue names: at 100,000 the
    # consumer's start-up is most of the time
    "quick": Mode("quick", 100_000, 1000, 3.0, 500, 1_000_000, 5, 300_000, 3.0),
    "full": Mode("full", 1_000_000, 1000, 10.0, 5000, 1_000_000, 5, 500_000, 5.0),
}

# Broker settings.  Durability is each broker's default: Kafka leaves flushing to the OS page
# cache (log.flush.interval.* unset), tmqgate's wal_level 1 hands every write to the OS before
# the ack.  No initial rebalance delay on either; group heartbeats at each broker's default
# (KIP-848: Kafka 5 s, tmqgate 1 s; classic: the client's 3 s on both).
TMQGATE_CONFIG: dict[str, Any] = {
    "wal_level": 1,
    "group_initial_rebalance_delay_ms": 0,
}
KAFKA_HEAP_OPTS = "-Xmx1G -Xms1G"  # what Apache Kafka's kafka-server-start.sh uses


@dataclass
class Running:
    """A started broker: where it listens, its pid, and how to stop it."""

    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]
    http: str | None = None
    start_s: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)


def start_tmqgate(workdir: Path, workers: int = 1) -> Running:
    """`tmqgate serve --workers N` (bench/run.py's `--workers`, default 1): the pid is the
    supervisor's where N > 1, whose ResourceSampler counts its workers too."""
    from compat_tests.brokers import TmqgateProcess

    t0 = time.perf_counter()
    proc = TmqgateProcess(workdir, config=TMQGATE_CONFIG, ready_timeout=120, workers=workers)
    proc.start()
    assert proc.proc is not None
    settings = {**{k: str(v) for k, v in TMQGATE_CONFIG.items()}, "workers": str(workers)}
    return Running("tmqgate", proc.bootstrap, proc.proc.pid, proc.stop, f"127.0.0.1:{proc.http_port}",
                   time.perf_counter() - t0, settings)


def start_kafka(workdir: Path) -> Running:
    from compat_tests import kafka_ref

    t0 = time.perf_counter()
    ref = kafka_ref.start_reference_kafka(workdir, heap_opts=KAFKA_HEAP_OPTS,
                                          jvm_opts=kafka_ref.FULL_JIT_JVM_OPTS, ready_timeout=240)
    settings = {"KAFKA_HEAP_OPTS": KAFKA_HEAP_OPTS, "KAFKA_JVM_PERFORMANCE_OPTS": kafka_ref.FULL_JIT_JVM_OPTS,
                **kafka_ref.SINGLE_NODE_CONFIG}
    return Running("kafka", ref.bootstrap, ref.pid, ref.stop, None, time.perf_counter() - t0, settings)


STARTERS = {"tmqgate": start_tmqgate, "kafka": start_kafka}


def _step(out: dict[str, Any], key: str, fn: Callable[[], Any]) -> Any:
    """Run one measurement; a failure is recorded under out["errors"] and the run goes on."""
    log(f"  {key} ...")
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - a benchmark reports what failed and continues
        out.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
        log(f"  {key} FAILED: {exc}")
        traceback.print_exc(file=sys.stderr)
        return None
    out[key] = value
    log(f"  {key} done in {time.perf_counter() - t0:.1f}s: {_brief(value)}")
    return value


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) < 300 else text[:300] + "..."


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def throughput_workloads(broker: Running, mode: Mode, out: dict[str, Any],
                         wrap: Callable[[str], Any] | None = None) -> None:
    """Workloads 1 and 2 with the broker's resources sampled around each run.  `wrap(label)`
    gives an extra context manager per workload (the profiler)."""
    import contextlib

    usage: dict[str, Usage] = {}
    topics: dict[str, str] = {}
    if mode.warmup_records:
        def warmup() -> dict[str, Any]:
            topic = workloads.unique("bench-warmup")
            workloads.create_topic(broker.bootstrap, topic, 4)
            return {"produce": workloads.producer_perf(broker.bootstrap, topic, mode.warmup_records, "1"),
                    "consume": workloads.consumer_perf(broker.bootstrap, topic, mode.warmup_records)}

        _step(out, "warmup", warmup)
    for acks in ("1", "all"):
        key = f"produce_acks_{acks}"
        topic = workloads.unique(f"bench-perf-acks{acks}")

        def produce(topic: str = topic, acks: str = acks, key: str = key) -> dict[str, Any]:
            workloads.create_topic(broker.bootstrap, topic, 4)
            with wrap(key) if wrap else contextlib.nullcontext(), ResourceSampler(broker.pid) as s:
                result = workloads.producer_perf(broker.bootstrap, topic, mode.records, acks)
            usage[key] = s.usage
            return result

        if _step(out, key, produce) is not None:
            topics[acks] = topic
    if "1" in topics:
        def consume() -> dict[str, Any]:
            with wrap("consume") if wrap else contextlib.nullcontext(), ResourceSampler(broker.pid) as s:
                result = workloads.consumer_perf(broker.bootstrap, topics["1"], mode.records)
            usage["consume"] = s.usage
            return result

        _step(out, "consume", consume)
    out["resources"] = {k: u.to_json() for k, u in usage.items()}


def query_workload(broker: Running, mode: Mode, wrap: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Workload 4 with the broker's resources sampled around the ingest and each topic's read
    (``resources``: label → usage; ``wrap(label)``: the profiler, labels prefixed ``query_``)."""
    import contextlib

    usage: dict[str, Usage] = {}

    @contextlib.contextmanager
    def around(label: str) -> Iterator[None]:
        with wrap(f"query_{label}") if wrap else contextlib.nullcontext(), ResourceSampler(broker.pid) as s:
            yield
        usage[label] = s.usage

    result = workloads.query_topics(broker.bootstrap, str(broker.http), mode.query_rows, around)
    result["resources"] = {k: u.to_json() for k, u in usage.items()}
    return result


def run_broker(name: str, mode: Mode, workdir: Path, workers: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": os.getloadavg()}
    log(f"starting {name}")
    broker = start_tmqgate(workdir / name, workers) if name == "tmqgate" else STARTERS[name](workdir / name)
    out.update(start_s=broker.start_s, settings=broker.settings, pid=broker.pid)
    log(f"{name} ready on {broker.bootstrap} (pid {broker.pid}) in {broker.start_s:.1f}s")
    try:
        throughput_workloads(broker, mode, out)
        _step(out, "e2e", lambda: workloads.e2e_latency(broker.bootstrap, mode.e2e_rate, mode.e2e_seconds,
                                                        warmup_s=mode.e2e_warmup_s))
        if mode.e2e_java_records:
            _step(out, "e2e_java", lambda: workloads.e2e_latency_java(broker.bootstrap, mode.e2e_java_records))
        if broker.http:
            _step(out, "query", lambda: query_workload(broker, mode))
        for protocol in ("classic", "consumer"):
            _step(out, f"rebalance_{protocol}",
                  lambda p=protocol: workloads.rebalance(broker.bootstrap, p, mode.rebalance_trials))
    finally:
        out["load_after"] = os.getloadavg()
        log(f"stopping {name}")
        broker.stop()
    return out


def profile_tmqgate(mode: Mode, workdir: Path, out_dir: Path) -> dict[str, Any]:
    """A separate pass: fresh tmqgate, one worker (py-spy samples one process: what a core
    does), py-spy attached during workloads 1, 2 and 4."""
    if not pyspy.available():
        return {"error": "py-spy is not installed (pip install py-spy)"}
    broker = start_tmqgate(workdir / "tmqgate-profile")
    prof_dir = out_dir / "profiles"
    files: dict[str, Path] = {}
    out: dict[str, Any] = {}

    def wrap(label: str) -> pyspy.PySpy:
        files[label] = prof_dir / f"{mode.name}-{label}.raw.txt"
        return pyspy.PySpy(broker.pid, files[label])

    try:
        throughput_workloads(broker, mode, out, wrap)
        if broker.http:
            query = _step(out, "query", lambda: query_workload(broker, mode, wrap))
            for label, use in ((query or {}).get("resources") or {}).items():
                out["resources"][f"query_{label}"] = use
                out[f"query_{label}"] = (query["topics"].get(label) if label != "ingest" else
                                         {"records_per_s": query["ingest"]["rows_per_s"]})
    finally:
        broker.stop()
    out["profiles"] = {}
    for label, path in files.items():
        if path.exists():
            samples, own, total = pyspy.top_entries(path, 15)
            out["profiles"][label] = {"file": str(path), "samples": samples,
                                      "own": [e.__dict__ for e in own], "total": [e.__dict__ for e in total]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    for name in MODES:
        group.add_argument(f"--{name}", dest="mode", action="store_const", const=name)
    parser.add_argument("--out", type=Path, default=None, help="where RESULTS.md etc. go (default bench/)")
    parser.add_argument("--workdir", type=Path, default=None, help="broker data (default: a temporary dir)")
    parser.add_argument("--brokers", default=None, help="comma-separated subset of tmqgate,kafka")
    parser.add_argument("--profile", action="store_true", help="also profile tmqgate with py-spy (1, 2 and 4)")
    parser.add_argument("--profile-only", action="store_true",
                        help="only the py-spy pass: writes PROFILE.md, not RESULTS.md")
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    parser.add_argument("--keep", action="store_true", help="keep the broker data afterwards")
    parser.add_argument("--workers", type=int, default=1,
                        help="tmqgate's `serve --workers` (default 1: what one core does, beside Kafka using "
                        "every core; `tmqgate serve` itself runs one per core, bench/workers_bench.py scales it)")
    args = parser.parse_args(argv)
    mode = MODES[args.mode or "quick"]
    brokers = tuple(args.brokers.split(",")) if args.brokers else mode.brokers
    if args.profile_only:
        brokers, args.profile = (), True
    out_dir = (args.out or (BENCH_DIR / ".smoke" if mode.name == "smoke" else BENCH_DIR)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="tmqgate-bench-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    command = "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {"mode": mode.__dict__, "command": command.strip(),
                               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                               "machine": report.machine_info(workdir), "versions": report.versions(),
                               "brokers": {}}
    t0 = time.perf_counter()
    log(f"mode {mode.name}, brokers {', '.join(brokers)}, data in {workdir}")
    try:
        for name in brokers:
            try:
                results["brokers"][name] = run_broker(name, mode, workdir, args.workers)
            except Exception as exc:  # noqa: BLE001 - e.g. Kafka jars missing: report and go on
                traceback.print_exc(file=sys.stderr)
                results["brokers"][name] = {"errors": {"start": f"{type(exc).__name__}: {exc}"}}
        if args.profile:
            log("profiling tmqgate with py-spy")
            try:
                results["profile"] = profile_tmqgate(mode, workdir, out_dir)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                results["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    results["total_s"] = time.perf_counter() - t0
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if "profile" in results:
        (out_dir / "PROFILE.md").write_text(report.profile_markdown(results))
    if args.profile_only:
        log(f"done in {results['total_s']:.0f}s: {out_dir / 'PROFILE.md'}")
        return 0
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    chart = None
    if not args.no_chart:
        try:
            chart = report.chart(results, out_dir / "results.png")
        except ImportError:
            log("matplotlib not installed (pip install -e .[bench]): no chart")
    (out_dir / "RESULTS.md").write_text(report.markdown(results, chart))
    # The other benchmarks' sections, kept across runs of this one: each module renders its own
    # results file (written when it last ran) and RESULTS.md takes the section in its place.
    from bench import security_bench

    for module_name, stem in SECTION_BENCHES.items():
        kept = out_dir / f"{stem}_results.json"
        if kept.exists():
            module = importlib.import_module(f"bench.{module_name}")
            security_bench.splice(out_dir / "RESULTS.md", module.markdown(json.loads(kept.read_text())),
                                  module.SECTION)
    log(f"done in {results['total_s']:.0f}s: {out_dir / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
