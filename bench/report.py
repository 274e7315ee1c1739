"""RESULTS.md, PROFILE.md and results.png from the results dictionary of bench/run.py."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- environment


def _meminfo_bytes(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mount_of(path: Path) -> str:
    """Device and filesystem type holding `path` (longest mount point prefix)."""
    best = ("", "?", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if str(path).startswith(mnt) and len(mnt) >= len(best[0]):
                best = (mnt, dev, fstype)
    except OSError:
        pass
    return f"{best[1]} ({best[2]}, mounted on {best[0]})"


def machine_info(workdir: Path) -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "cpu_model": _cpu_model(), "ram_bytes": _meminfo_bytes("MemTotal"),
            "kernel": f"{platform.system()} {platform.release()}", "data_disk": _mount_of(workdir),
            "load_at_start": os.getloadavg()}


def _cmd_first_line(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (proc.stdout + proc.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unavailable"


def _pkg(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    from compat_tests.kafka_ref import kafka_version

    commit = _cmd_first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    # the broker's own packages only: other work in progress elsewhere in the tree is no concern
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "broker", "storage",
                            "protocol", "coordinator"], capture_output=True, text=True).stdout.strip()
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        librdkafka = "not installed"
    return {"tmqgate": f"{_pkg('tmqgate')} (git {commit}{', with uncommitted broker changes' if dirty else ''})",
            "python": platform.python_version(), "apache_kafka": kafka_version() or "not installed",
            "java": _cmd_first_line(["java", "-version"]), "confluent_kafka": _pkg("confluent-kafka"),
            "librdkafka": librdkafka, "pyarrow": _pkg("pyarrow"), "plyvel": _pkg("plyvel"),
            "py_spy": _pkg("py-spy"), "matplotlib": _pkg("matplotlib")}


# --------------------------------------------------------------------------- formatting


def _num(x: Any, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and digits:
        return f"{x:,.{digits}f}"
    if isinstance(x, float) and abs(x) < 100 and x != int(x):
        return f"{x:,.1f}"
    return f"{x:,.0f}"


def _mb(n: int | None) -> str:
    return "–" if not n else f"{n / 2**20:,.0f} MiB"


def _ratio(t: Any, k: Any) -> str:
    if not isinstance(t, int | float) or not isinstance(k, int | float) or not k or math.isnan(t) or math.isnan(k):
        return "–"
    return f"{t / k:.2f}"


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# --------------------------------------------------------------------------- RESULTS.md


class _Run(NamedTuple):
    """What the sections of RESULTS.md read: the results, the brokers run and their figures."""

    res: dict[str, Any]
    mode: dict[str, Any]
    brokers: dict[str, Any]
    names: list[str]
    both: bool
    t: dict[str, Any]
    k: dict[str, Any]


def markdown(res: dict[str, Any], chart: Path | None) -> str:
    mode = res["mode"]
    brokers = res["brokers"]
    names = [n for n in ("tmqgate", "kafka") if n in brokers]
    both = "tmqgate" in brokers and "kafka" in brokers
    t, k = brokers.get("tmqgate", {}), brokers.get("kafka", {})
    md: list[str] = [
        "# Benchmarks: tmqgate and Apache Kafka",
        "",
        f"Mode **{mode['name']}** — `{res['command']}` — {res['started']} to {res['finished']} "
        f"({res['total_s']:.0f} s). Written by `bench/run.py`; figures are single runs on a shared "
        "machine, not averages: read them as orders of magnitude and ratios, not as exact values.",
        "",
    ]
    if chart is not None:
        md += [f"![results]({chart.name})", ""]

    run = _Run(res, mode, brokers, names, both, t, k)
    for section in (_setup_section, _producer_section, _consumer_section, _latency_section, _query_section,
                    _rebalance_section, _resources_section, _failures_section):
        md += section(run)
    return "\n".join(md)


def _setup_section(run: _Run) -> list[str]:
    """Machine and load, versions and settings of both brokers."""
    res, mode, brokers, names, t, k = run.res, run.mode, run.brokers, run.names, run.t, run.k
    m, v = res["machine"], res["versions"]
    md: list[str] = []
    md += ["## Machine and load", ""]
    loads = [f"{n}: {_loads(brokers[n])}" for n in names]
    md += [f"- {m['nproc']} CPUs ({m['cpu_model']}), {_mb(m['ram_bytes'])} RAM, {m['kernel']}",
           f"- broker data of both brokers on the same disk: {m['data_disk']}",
           "- brokers, clients (perf tools, librdkafka) and other work share the machine; "
           f"1-minute load average at start {m['load_at_start'][0]:.2f}; " + "; ".join(loads),
           ""]

    md += ["## Versions", ""]
    md += [f"- tmqgate {v['tmqgate']} on Python {v['python']} (pyarrow {v['pyarrow']}, plyvel {v['plyvel']})",
           f"- Apache Kafka {v['apache_kafka']} (reference broker from its Maven jars, KRaft combined mode, "
           f"one node) on {v['java']}",
           f"- clients: Kafka {v['apache_kafka']} perf tools (Java), confluent-kafka {v['confluent_kafka']} "
           f"(librdkafka {v['librdkafka']})",
           ""]

    md += ["## Settings", "",
           "- **Durability, both at their defaults and comparable:** Apache Kafka acknowledges once the "
           "batch is in its log segment in the OS page cache (`log.flush.interval.*` unset: flushing is left "
           "to the OS); tmqgate `wal_level = 1` hands every WAL write to the OS before the ack (survives a "
           "broker crash, not a power loss). Neither fsyncs per write.",
           "- **tmqgate**: `tmqgate serve --config --workers N` with " +
           ", ".join(f"`{a} = {b}`" for a, b in _get(t, "settings").items()) if _get(t, "settings") else
           "- **tmqgate**: not run",
           "  (`workers`: `serve --workers`, 1 unless `--workers` says otherwise: what one core of tmqgate "
           "does, while Kafka's threads use every core; `tmqgate serve` runs one worker per core by default, "
           "and bench/workers_bench.py measures that scaling; "
           "`group_initial_rebalance_delay_ms = 0` as the Kafka reference has; KIP-848 heartbeat "
           "intervals at each broker's default: tmqgate 1 s, Kafka 5 s).",
           "- **Apache Kafka**: " + (", ".join(f"`{a}={b}`" for a, b in k["settings"].items())
                                     if _get(k, "settings") else "not run") +
           "; everything else at Kafka's defaults.",
           f"- **Workloads**: {mode['records']:,} records of 1 KiB into a 4-partition topic, "
           "kafka-producer-perf-test with `--throughput -1`, `batch.size=65536 linger.ms=5`; "
           "perf tools on a full-JIT JVM (`-Xmx1g`, serial GC)"
           + (f"; first an unmeasured warm-up on each broker, {mode['warmup_records']:,} records produced "
              "(acks=1) and consumed with the same tools — Kafka's JIT needs that many before its throughput and "
              "latency settle" if mode["warmup_records"] else "")
           + f". End-to-end: {mode['e2e_rate']:,} msg/s for {mode['e2e_seconds']:g} s of 1 KiB messages "
           f"(acks=all, linger.ms=0) into a 1-partition topic, after {mode['e2e_warmup_s']:g} s at the same rate "
           "unmeasured, a consumer in the same process"
           + (f"; EndToEndLatency with {mode['e2e_java_records']:,} messages" if mode["e2e_java_records"] else "")
           + f". Query topics over {mode['query_rows']:,} rows. Rebalance: {mode['rebalance_trials']} trial(s) "
           "per protocol.",
           ""]
    return md


def _producer_section(run: _Run) -> list[str]:
    """1. Producer throughput, and tmqgate / Kafka where both ran."""
    brokers, names, both, t, k = run.brokers, run.names, run.both, run.t, run.k
    md: list[str] = []
    md += ["## 1. Producer throughput (kafka-producer-perf-test)", ""]
    rows = []
    for n in names:
        for acks in ("1", "all"):
            r = _get(brokers[n], f"produce_acks_{acks}")
            if r:
                rows.append([n, acks, _num(r["records_per_s"]), _num(r["mb_per_s"], 2), _num(r["avg_ms"]),
                             _num(r["p50_ms"]), _num(r["p99_ms"]), _num(r["p999_ms"]), _num(r["max_ms"])])
    md += _table(["broker", "acks", "records/s", "MB/s", "avg ms", "p50 ms", "p99 ms", "p99.9 ms", "max ms"], rows)
    if both:
        md += ["", "tmqgate / Kafka (throughput: > 1 favours tmqgate; latency: < 1 favours tmqgate):", ""]
        rows = []
        for acks in ("1", "all"):
            a, b = _get(t, f"produce_acks_{acks}") or {}, _get(k, f"produce_acks_{acks}") or {}
            rows.append([acks] + [_ratio(a.get(x), b.get(x)) for x in
                                  ("records_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms")])
        md += _table(["acks", "records/s", "MB/s", "p50", "p99", "p99.9"], rows)
    md += [""]
    return md


def _consumer_section(run: _Run) -> list[str]:
    """2. Consumer throughput, and tmqgate / Kafka where both ran."""
    brokers, names, both, t, k = run.brokers, run.names, run.both, run.t, run.k
    md: list[str] = []
    md += ["## 2. Consumer throughput (kafka-consumer-perf-test, over the acks=1 data)", "",
           "`MB/s` and `records/s` span the whole run including the group join; `fetch` figures exclude it.", ""]
    rows = []
    for n in names:
        r = _get(brokers[n], "consume")
        if r:
            rows.append([n, _num(r["mb_per_s"], 1), _num(r["records_per_s"]), _num(r["fetch_mb_per_s"], 1),
                         _num(r["fetch_records_per_s"]), _num(r["rebalance_ms"])])
    md += _table(["broker", "MB/s", "records/s", "fetch MB/s", "fetch records/s", "group join ms"], rows)
    if both:
        a, b = _get(t, "consume") or {}, _get(k, "consume") or {}
        md += ["", "tmqgate / Kafka: MB/s " + _ratio(a.get("mb_per_s"), b.get("mb_per_s")) +
               ", fetch MB/s " + _ratio(a.get("fetch_mb_per_s"), b.get("fetch_mb_per_s")) +
               ", fetch records/s " + _ratio(a.get("fetch_records_per_s"), b.get("fetch_records_per_s"))]
    md += [""]
    return md


def _latency_section(run: _Run) -> list[str]:
    """3. End-to-end latency, and tmqgate / Kafka where both ran."""
    brokers, names, both, t, k = run.brokers, run.names, run.both, run.t, run.k
    md: list[str] = []
    md += ["## 3. End-to-end latency", "",
           "Produce call to consumer receipt, in ms. *fixed rate*: confluent-kafka pair at a fixed rate; "
           "*EndToEndLatency*: Kafka's tool, one message at a time (send, wait until consumed, repeat).", ""]
    rows = []
    for n in names:
        for key, label in (("e2e", "fixed rate"), ("e2e_java", "EndToEndLatency")):
            r = _get(brokers[n], key)
            if r:
                extra = f"{r['received']:,}/{r['messages']:,} received at {r['achieved_rate']:,} msg/s" \
                    if key == "e2e" else f"{r['messages']:,} messages"
                rows.append([n, label, _num(r["mean_ms"], 2), _num(r["p50_ms"], 2), _num(r["p99_ms"], 2),
                             _num(r["p999_ms"], 2), extra])
    md += _table(["broker", "method", "mean", "p50", "p99", "p99.9", "messages"], rows)
    if both:
        rows = []
        for key, label in (("e2e", "fixed rate"), ("e2e_java", "EndToEndLatency")):
            a, b = _get(t, key) or {}, _get(k, key) or {}
            rows.append([label] + [_ratio(a.get(x), b.get(x)) for x in ("mean_ms", "p50_ms", "p99_ms", "p999_ms")])
        md += ["", "tmqgate / Kafka (< 1 favours tmqgate):", ""]
        md += _table(["method", "mean", "p50", "p99", "p99.9"], rows)
    md += [""]
    return md


def _per_core(q: dict[str, Any], label: str, rows: int) -> str:
    """", N rows per broker CPU-s (C s)" for a span of workload 4 that sampled the broker."""
    cpu = _get(q, "resources", label, "cpu_s")
    return f" ({_num(rows / cpu)} rows per broker CPU-s: {_num(cpu, 2)} CPU-s)" if cpu else ""


def _query_section(run: _Run) -> list[str]:
    """4. Query topics (tmqgate only)."""
    t = run.t
    md: list[str] = []
    md += ["## 4. Query topics (tmqgate only)", ""]
    q = _get(t, "query")
    if q:
        ing = q["ingest"]
        md += [f"{q['rows']:,} rows (`ts TIMESTAMP, v DOUBLE, k BIGINT`, k uniform 0..99, tag `g`, 64 child "
               "tables) in a database with `VGROUPS 4`, written as InfluxDB line protocol (100 lines per Kafka "
               f"record, keyed by child table) through Produce at {_num(ing['rows_per_s'])} rows/s"
               + _per_core(q, "ingest", q["rows"]) + ". "
               "Each topic read from the beginning to the end of all 4 partitions by one confluent-kafka "
               "consumer. *streaming* = from the first delivered record to the last (the rate the topic "
               "delivers at); *whole read* = from assign() to the last partition EOF, which adds the "
               "consumer's start-up and the final empty long-poll (`fetch.wait.max.ms`, 500 ms) that "
               "reports the end. *scanned rows/s* = all rows in the WAL / streaming time, *delivered* = rows "
               "reaching the consumer. *per broker CPU-s* = delivered rows / the broker's CPU seconds over "
               "the whole read (all its threads): what one busy core of the broker delivers, whoever else "
               "(here the consumer, on the other core) is the limit of the machine. *consumer CPU s* = the "
               "benchmark process's CPU seconds over the whole read (librdkafka's threads and the Python "
               "loop that takes the records; the broker's sampler, also in it, reads /proc ten times a "
               "second): where it nears the streaming time, the consumer sets the rate.", ""]
        rows = []
        for label, r in q["topics"].items():
            cpu = _get(q, "resources", label, "cpu_s")
            rows.append([f"`{r['definition'].split(' AS ', 1)[1]}`", f"{r['records']:,} / {r['expected']:,}",
                         _num(r["streaming_s"], 2), _num(r["streaming_records_per_s"]),
                         _num(r["rows_scanned_per_s"]),
                         _num(r["seconds"], 2), _num(r["records_per_s"]), _num(r["mb_per_s"], 1),
                         _num(cpu, 2), _num(r["records"] / cpu if cpu else None),
                         _num(r.get("client_cpu_s"), 2)])
        md += _table(["topic", "delivered / expected", "streaming s", "delivered rows/s", "scanned rows/s",
                      "whole read s", "whole read rows/s", "value MB/s", "broker CPU s",
                      "delivered rows per broker CPU-s", "consumer CPU s"], rows)
        cons = _get(t, "consume")
        if cons:
            md += ["", f"For comparison, the plain topic of workload 2 delivered "
                   f"{_num(cons['fetch_records_per_s'])} records/s (1 KiB each) to kafka-consumer-perf-test."]
    else:
        md += ["not run" + (f": {_get(t, 'errors', 'query')}" if _get(t, "errors", "query") else "")]
    md += [""]
    return md


def _rebalance_section(run: _Run) -> list[str]:
    """5. Rebalance, and tmqgate / Kafka where both ran."""
    brokers, names, both, t, k = run.brokers, run.names, run.both, run.t, run.k
    md: list[str] = []
    md += ["## 5. Rebalance", "",
           "Seconds from a second consumer's `subscribe()` until the two members own disjoint halves of a "
           "4-partition topic (fed at 1,000 msg/s) and each has received a message since then. "
           "confluent-kafka; classic = librdkafka's default eager `range,roundrobin` assignors, "
           "heartbeat 3 s; KIP-848 = `group.protocol=consumer`, server-side assignment, heartbeat "
           "interval set by the broker (Kafka 5 s, tmqgate 1 s, and 200 ms while a member waits for "
           "partitions another member must release).", ""]
    rows = []
    for n in names:
        for proto, label in (("classic", "classic"), ("consumer", "KIP-848")):
            r = _get(brokers[n], f"rebalance_{proto}")
            if r:
                rows.append([n, label, _num(r.get("median_s"), 2), _num(r.get("min_s"), 2), _num(r.get("max_s"), 2),
                             ", ".join(f"{x:.2f}" for x in r["times_s"]) + (f" ({len(r['errors'])} failed)"
                                                                            if r["errors"] else "")])
    md += _table(["broker", "protocol", "median s", "min s", "max s", "trials"], rows)
    if both:
        md += ["", "tmqgate / Kafka median: classic " +
               _ratio(_get(t, "rebalance_classic", "median_s"), _get(k, "rebalance_classic", "median_s")) +
               ", KIP-848 " +
               _ratio(_get(t, "rebalance_consumer", "median_s"), _get(k, "rebalance_consumer", "median_s"))]
    md += [""]
    return md


def _resources_section(run: _Run) -> list[str]:
    """6. Broker CPU and memory, and tmqgate / Kafka where both ran."""
    mode, brokers, names, both, t, k = run.mode, run.brokers, run.names, run.both, run.t, run.k
    md: list[str] = []
    md += ["## 6. Broker CPU and memory during workloads 1 and 2", "",
           "CPU = utime + stime of the broker process (all threads) over the run, from /proc/PID/stat; "
           "tmqgate with `workers` above 1 is the supervisor and its worker processes, every figure the sum "
           "of theirs (memory: each sample's sum); "
           "peak RSS sampled every 100 ms (VmRSS), and of its anonymous part (RssAnon: heap, stacks — VmRSS "
           "also counts touched pages of memory-mapped files, e.g. the SSTables LevelDB reads through mmap, "
           "which are page cache the kernel can reclaim); VmHWM = the kernel's high-water mark of VmRSS since "
           "the broker started. *main thread* = the thread whose id is the pid: tmqgate's event loop, one per "
           "worker (the rest "
           "is LevelDB's compaction thread and other helpers), the JVM's main thread for Kafka (which does "
           "little; its work runs in network, I/O, GC and JIT threads). *disk writes* = /proc/PID/io "
           "`write_bytes` over the run (counted when the broker dirties page-cache pages, so data the OS "
           "flushes later counts too), and its multiple of the records' payload (records × 1 KiB). "
           "*busy* = broker CPU / wall time, in % of one core. The perf tool (a JVM) is a "
           "separate process: its CPU seconds are the *client CPU s* column; where the broker is far from "
           "busy, the throughput of workloads 1–2 is set by the client and the shared CPUs, not by the broker.",
           ""]
    rows = []
    for n in names:
        used = _get(brokers[n], "resources") or {}
        for key, label, wl in (("produce_acks_1", "1 acks=1", "produce_acks_1"),
                               ("produce_acks_all", "1 acks=all", "produce_acks_all"), ("consume", "2", "consume")):
            r = used.get(key)
            if r:
                per = r["cpu_s"] / (mode["records"] / 1e6) if mode["records"] else None
                busy = 100 * r["cpu_s"] / r["wall_s"] if r["wall_s"] else None
                written = r.get("disk_write_bytes")
                amp = (f"{_mb(written)} ({written / (mode['records'] * 1024):.1f}×)"
                       if written and wl != "consume" and mode["records"] else _mb(written) if written else "0")
                rows.append([n, label, _num(r["wall_s"], 1), _num(r["cpu_s"], 2),
                             _num(r.get("main_thread_cpu_s"), 2), _num(busy, 0) + "%",
                             _num(per, 1), _num(_get(brokers[n], wl, "client_cpu_s"), 1), amp,
                             _mb(r["peak_rss_bytes"]), _mb(r.get("peak_rss_anon_bytes")), _mb(r["vmhwm_bytes"])])
    md += _table(["broker", "workload", "wall s", "CPU s", "main thread CPU s", "busy", "CPU s per M records",
                  "client CPU s", "disk writes (× payload)",
                  "peak RSS", "peak RssAnon", "VmHWM"], rows)
    if both:
        rt, rk = _get(t, "resources") or {}, _get(k, "resources") or {}
        rows = []
        for key in ("produce_acks_1", "produce_acks_all", "consume"):
            a, b = rt.get(key) or {}, rk.get(key) or {}
            rows.append([key, _ratio(a.get("cpu_s"), b.get("cpu_s")),
                         _ratio(a.get("peak_rss_bytes"), b.get("peak_rss_bytes")),
                         _ratio(a.get("peak_rss_anon_bytes"), b.get("peak_rss_anon_bytes"))])
        md += ["", "tmqgate / Kafka (< 1 favours tmqgate):", ""]
        md += _table(["workload", "CPU s", "peak RSS", "peak RssAnon"], rows)
    md += [""]
    return md


def _failures_section(run: _Run) -> list[str]:
    """Start-up times, failed workloads and the PROFILE.md link."""
    res, brokers, names = run.res, run.brokers, run.names
    md: list[str] = []
    md += ["## Start-up and failures", ""]
    for n in names:
        b = brokers[n]
        md.append(f"- {n}: ready in {_num(b.get('start_s'), 1)} s" if b.get("start_s") else f"- {n}: did not start")
        for key, err in (b.get("errors") or {}).items():
            md.append(f"  - **{key} failed**: {err}")
        for proto in ("classic", "consumer"):
            for err in _get(b, f"rebalance_{proto}", "errors") or []:
                md.append(f"  - rebalance {proto} trial failed: {err}")
    if "profile" in res:
        md += ["", "A py-spy profile of tmqgate during workloads 1 and 2 (separate pass) is in "
               "[PROFILE.md](PROFILE.md)."]
    md += [""]
    return md


def _loads(b: dict[str, Any]) -> str:
    lo = [r.get("load1_min") for r in (b.get("resources") or {}).values()]
    hi = [r.get("load1_max") for r in (b.get("resources") or {}).values()]
    lo = [x for x in lo if x is not None]
    hi = [x for x in hi if x is not None]
    span = f"{min(lo):.2f}–{max(hi):.2f} during workloads 1–2" if lo else "not sampled"
    before = b.get("load_before") or [float("nan")]
    after = b.get("load_after") or [float("nan")]
    return f"{before[0]:.2f} before, {span}, {after[0]:.2f} after"


# --------------------------------------------------------------------------- PROFILE.md


def profile_markdown(res: dict[str, Any]) -> str:
    prof = res.get("profile") or {}
    md = ["# tmqgate under py-spy", "",
          f"`{res['command']}` — mode **{res['mode']['name']}**, {res['started']}, 1-minute load average "
          f"{res['machine']['load_at_start'][0]:.2f} at start, {res['machine']['nproc']} CPUs. "
          "A fresh tmqgate (after the same unmeasured warm-up as the comparison) with `py-spy record --format "
          "raw --function --rate 100` attached (blocking sampling, which slows the broker a little) during "
          "workloads 1, 2 and 4 (the line-protocol ingest and each query topic's read). Idle threads are not "
          "sampled; a C extension's "
          "time (LevelDB, crc32c, pyarrow) counts against the Python function that called it. *own* = the "
          "innermost frame, *total* = anywhere on the stack. Raw collapsed stacks sit beside this file in "
          "`profiles/` (not committed; feed them to flamegraph.pl or speedscope).", ""]
    if "error" in prof:
        md += [f"Profiling failed: {prof['error']}", ""]
    md += ["`EpollSelector.select` is the event loop in `epoll_wait`: py-spy counts it as busy, but it is "
           "mostly the broker waiting for the network — compare the broker's CPU seconds with the wall time. "
           "The second percentage column leaves those samples out. Samples also include time a thread spends "
           "blocked in a system call or waiting for a CPU on a loaded machine, so they are closer to wall "
           "time than to CPU time.", ""]
    for label, p in (prof.get("profiles") or {}).items():
        perf = prof.get(label) or {}
        use = _get(prof, "resources", label) or {}
        speed = (f"{_num(perf.get('records_per_s'))} records/s" if perf.get("records_per_s") else
                 f"{_num(perf.get('fetch_records_per_s'))} fetch records/s")
        md += [f"## {label}", "",
               f"{p['samples']:,} samples; under the profiler {speed}; broker CPU "
               f"{_num(use.get('cpu_s'), 2)} s (event-loop thread {_num(use.get('main_thread_cpu_s'), 2)} s, "
               f"other threads such as LevelDB's compaction the rest) over {_num(use.get('wall_s'), 1)} s wall; "
               f"{_mb(use.get('disk_write_bytes'))} written to disk.", ""]
        for kind, title in (("own", "Top {} by own time (innermost frame)"),
                            ("total", "Top {} of tmqgate's functions by total time (anywhere on the stack)")):
            rows = [[str(i), f"{e['share'] * 100:.1f}%",
                     f"{e['busy_share'] * 100:.1f}%" if e.get("busy_share") else "–", f"`{e['frame']}`"]
                    for i, e in enumerate(p[kind], 1)]
            md += [title.format(len(rows)) + ":", ""] + _table(
                ["#", f"{kind} (all samples)", f"{kind} (samples not in epoll)", "function (file:line)"], rows) + [""]
    return "\n".join(md)


# --------------------------------------------------------------------------- chart


def chart(res: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    brokers = res["brokers"]
    names = [n for n in ("tmqgate", "kafka") if n in brokers]
    colors = {"tmqgate": "#2a7ab0", "kafka": "#d9822b"}
    fig, axes = plt.subplots(2, 4, figsize=(19, 8.5))
    fig.suptitle(f"tmqgate vs Apache Kafka {res['versions']['apache_kafka']} — {res['mode']['name']} mode, "
                 f"{res['machine']['nproc']} CPUs, {res['started']}", fontsize=11)

    def bars(ax: Any, title: str, groups: list[str], values: dict[str, list[float | None]], ylabel: str,
             log: bool = False) -> None:
        width = 0.8 / max(1, len(values))
        for i, (n, vals) in enumerate(values.items()):
            xs = [g + i * width for g in range(len(groups))]
            ys = [0 if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in vals]
            rects = ax.bar(xs, ys, width, label=n, color=colors.get(n))
            ax.bar_label(rects, labels=[_short(v) for v in vals], fontsize=7)
        ax.set_xticks([g + width * (len(values) - 1) / 2 for g in range(len(groups))], groups, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7)

    b = brokers
    bars(axes[0][0], "1. producer (kafka-producer-perf-test)", ["acks=1", "acks=all"],
         {n: [_get(b[n], f"produce_acks_{a}", "records_per_s") for a in ("1", "all")] for n in names}, "records/s")
    bars(axes[0][1], "2. consumer (kafka-consumer-perf-test)", ["MB/s", "fetch MB/s"],
         {n: [_get(b[n], "consume", "mb_per_s"), _get(b[n], "consume", "fetch_mb_per_s")] for n in names}, "MB/s")
    bars(axes[0][2], "3. end-to-end latency (fixed rate)", ["p50", "p99", "p99.9"],
         {n: [_get(b[n], "e2e", f"{p}_ms") for p in ("p50", "p99", "p999")] for n in names}, "ms", log=True)
    bars(axes[0][3], "3. EndToEndLatency (one at a time)", ["p50", "p99", "p99.9"],
         {n: [_get(b[n], "e2e_java", f"{p}_ms") for p in ("p50", "p99", "p999")] for n in names}, "ms", log=True)
    q = _get(b.get("tmqgate", {}), "query", "topics") or {}
    bars(axes[1][0], "4. query topics (tmqgate): delivered rows/s", ["k < 10", "k < 90", "database"],
         {"tmqgate": [_get(q, key, "records_per_s") for key in ("select_k_lt_10", "select_k_lt_90", "database")]},
         "rows/s")
    bars(axes[1][1], "5. rebalance (median)", ["classic", "KIP-848"],
         {n: [_get(b[n], f"rebalance_{p}", "median_s") for p in ("classic", "consumer")] for n in names}, "s")
    bars(axes[1][2], "6. broker CPU s during 1+2", ["acks=1", "acks=all", "consume"],
         {n: [_get(b[n], "resources", key, "cpu_s") for key in ("produce_acks_1", "produce_acks_all", "consume")]
          for n in names}, "CPU s")
    bars(axes[1][3], "6. broker peak memory during 1+2", ["VmRSS", "RssAnon"],
         {n: [max((r.get(key) or 0 for r in (_get(b[n], "resources") or {}).values()), default=0) / 2**20
              for key in ("peak_rss_bytes", "peak_rss_anon_bytes")] for n in names}, "MiB")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _short(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.3g}"
