"""Share groups (KIP-932 queues), tmqgate beside Apache Kafka in one run: records/s with 1 and
with 4 share consumers, `python -m bench.share_bench [--records N] [--consumers 1,4]`.

Each broker is started as bench/run.py starts it (its settings: TMQGATE_CONFIG; Kafka's KRaft
reference broker, full JIT, 1 GiB heap), one after the other. On each: a topic of 4 partitions
(RF 1), N records of 1 KiB produced with kafka-producer-perf-test (acks=1, bench/workloads.py's
settings), an unmeasured warm-up read by a share group of its own (`--warmup` records, one
consumer: Kafka's JIT is cold otherwise), then for each consumer count C a fresh share group,
`share.auto.offset.reset=earliest` set on it with kafka-configs, and Apache Kafka's
kafka-share-consumer-perf-test (ShareConsumerPerformance) with `--threads C` reading the N
records (`--timeout 20000`: the most it waits between records). Its result line gives records/s
and MB/s (from its start, the group join included, to the last record); its detailed stats
(every 50 ms) when the first record came and so the rate from it on (a share group's
assignment can wait a heartbeat, 5 s on both brokers); its per-consumer stats how the records
split. The broker's CPU seconds (user + system, bench/procstats.py) are taken over the tool's
run, and the tool's own. A read counts as complete when the tool consumed exactly N records
(fewer: it timed out, and the read is reported failed; more: records were delivered again);
kafka-share-groups `--describe --offsets` then gives the group's lag (0: every record
acknowledged). Results: `share_results.json` beside this file (`--out`); `markdown(results)`
is the RESULTS.md section bench/run.py splices in (`SECTION`). A read that fails keeps the
tool's output and what the broker logged meanwhile in the JSON. Nothing asserts timings.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import report, workloads
from bench.procstats import cpu_seconds, uptime
from bench.run import STARTERS, Running, log
from compat_tests import kafka_ref

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_NAME = "share_results.json"
PARTITIONS = 4
RECORD_SIZE = 1024
TOOL_TIMEOUT_MS = 20_000  # the tool's --timeout: the most it waits between records
LOG_NAMES = {"tmqgate": "tmqgate.log", "kafka": kafka_ref.LOG_NAME}  # in the broker's workdir (bench/run.py)

# ShareConsumerPerformance's result line: start.time, end.time, data.consumed.in.MB, MB.sec,
# nMsg.sec, data.consumed.in.nMsg, fetch.time.ms (dates as yyyy-MM-dd HH:mm:ss:SSS)
_DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
_FIELDS = rf"({_DATE}), ({_DATE}), ([^,]+), ([^,]+), ([^,]+), (-?\d+), (-?\d+)"
_RESULT = re.compile(rf"^{_FIELDS}\s*$", re.M)
# --show-detailed-stats: a consumer's progress (at most every --reporting-interval ms, printed
# at a record it just received; the second date is when)
_PROGRESS = re.compile(rf"^{_FIELDS} for share consumer (\d+)\s*$", re.M)
# --show-consumer-stats: each consumer's own totals once it ends
_CONSUMER = re.compile(rf"^Share consumer (\S+) having client id (\S+) consumption metrics- {_FIELDS}\s*$", re.M)
REPORTING_INTERVAL_MS = 50


class ShareRunError(workloads.WorkloadError):
    """A share read failed; `details` has the tool's output and what the broker logged."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def parse_share_result(text: str) -> dict[str, Any]:
    """The group's line of kafka-share-consumer-perf-test (the last line of that shape)."""
    found = _RESULT.findall(text)
    if not found:
        raise workloads.WorkloadError(f"no result line in kafka-share-consumer-perf-test output:\n{text[-2000:]}")
    start, end, mb, mbs, rps, n, fetch_ms = found[-1]
    out: dict[str, Any] = {"start": start, "end": end, "mb": float(mb), "mb_per_s": float(mbs),
                           "records_per_s": float(rps), "records": int(n), "fetch_ms": int(fetch_ms)}
    out["per_consumer"] = [int(m[7]) for m in _CONSUMER.findall(text)]
    progress = [_when(m[1]) for m in _PROGRESS.findall(text)]
    if progress:  # the first record (to within the reporting interval), and the rate from it on
        first, t0, t1 = min(progress), _when(start), _when(end)
        out["first_record_s"] = round(first - t0, 3)
        if t1 > first:
            out["after_first_records_per_s"] = round(int(n) / (t1 - first), 1)
            out["after_first_mb_per_s"] = round(float(mb) / (t1 - first), 3)
    return out


def _when(date: str) -> float:
    """A date of the tool's (yyyy-MM-dd HH:mm:ss:SSS, local time) in seconds."""
    return datetime.datetime.strptime(date, "%Y-%m-%d %H:%M:%S:%f").timestamp()


def _tail(path: Path, n: int = 80) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def set_earliest(bootstrap: str, group: str) -> None:
    """`share.auto.offset.reset=earliest` on the (not yet existing) share group, with kafka-configs."""
    proc = kafka_ref.run_tool("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "groups",
                              "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=earliest",
                              timeout=120, check=False)
    if proc.returncode != 0:
        raise ShareRunError(f"kafka-configs --alter on group {group} exited {proc.returncode}",
                            {"stdout": proc.stdout[-4000:], "stderr": proc.stderr[-4000:]})


def share_read(broker: Running, log_path: Path, topic: str, records: int, consumers: int,
               prefix: str = "bench-share") -> dict[str, Any]:
    """A fresh share group (earliest) reads `records` of `topic` with `consumers` share consumers
    (kafka-share-consumer-perf-test --threads); the broker's CPU seconds over the tool's run."""
    group = workloads.unique(f"{prefix}-{consumers}c")
    set_earliest(broker.bootstrap, group)
    cmd = [str(kafka_ref.tool("kafka-share-consumer-perf-test")), "--bootstrap-server", broker.bootstrap,
           "--topic", topic, "--group", group, "--num-records", str(records), "--threads", str(consumers),
           "--timeout", str(TOOL_TIMEOUT_MS), "--show-consumer-stats", "--show-detailed-stats",
           "--reporting-interval", str(REPORTING_INTERVAL_MS)]
    log_size = log_path.stat().st_size if log_path.exists() else 0
    # at most 1 s of the tool's time per 100 records, with 5 minutes for a start, the join and its timeouts
    limit = 300 + records / 100
    before, cpu0, t0 = os.times(), cpu_seconds(broker.pid), time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=workloads.TOOL_ENV)
    except subprocess.TimeoutExpired as exc:
        raise ShareRunError(f"kafka-share-consumer-perf-test ({consumers} consumers, group {group}) did not finish "
                            f"in {limit:.0f} s", {
                                "group": group, "command": " ".join(cmd),
                                "stdout": _text(exc.stdout)[-4000:], "stderr": _text(exc.stderr)[-8000:],
                                "broker_log": _log_since(log_path, log_size)}) from exc
    wall, cpu1, after = time.perf_counter() - t0, cpu_seconds(broker.pid), os.times()
    details = {"group": group, "command": " ".join(cmd), "returncode": proc.returncode,
               "stdout": proc.stdout[-4000:], "stderr": proc.stderr[-8000:]}
    if proc.returncode != 0:
        raise ShareRunError(f"kafka-share-consumer-perf-test ({consumers} consumers) exited {proc.returncode}",
                            {**details, "broker_log": _log_since(log_path, log_size)})
    try:
        result: dict[str, Any] = parse_share_result(proc.stdout)
    except workloads.WorkloadError as exc:
        raise ShareRunError(str(exc), {**details, "broker_log": _log_since(log_path, log_size)}) from exc
    result.update(consumers=consumers, group=group, wall_s=round(wall, 3), complete=result["records"] == records,
                  broker_cpu_s=round(cpu1 - cpu0, 3) if cpu0 is not None and cpu1 is not None else None,
                  client_cpu_s=round(after.children_user + after.children_system
                                     - before.children_user - before.children_system, 3))
    if result["broker_cpu_s"] is not None and result["records"]:
        result["broker_cpu_us_per_record"] = round(1e6 * result["broker_cpu_s"] / result["records"], 2)
    if not result["complete"]:
        result["stderr"] = proc.stderr[-8000:]
        result["broker_log"] = _log_since(log_path, log_size)
        if result["records"] < records:
            raise ShareRunError(f"the share group consumed {result['records']} of {records} records "
                                f"({consumers} consumers, group {group})", {**details, **result})
    return result


def group_lag(bootstrap: str, group: str, topic: str) -> dict[str, Any]:
    """`kafka-share-groups --describe --offsets` once the group's consumers have left: each
    partition's start offset and lag (records not yet acknowledged); `lag` is their sum (None
    when a partition's is unknown or the tool failed, `error` then says why)."""
    proc = kafka_ref.run_tool("kafka-share-groups", "--bootstrap-server", bootstrap, "--describe", "--offsets",
                              "--group", group, timeout=120, check=False)
    rows = [line.split() for line in proc.stdout.splitlines()]
    parts = {int(r[2]): (r[3], r[4]) for r in rows if len(r) >= 5 and r[0] == group and r[1] == topic
             and r[2].isdigit()}
    out: dict[str, Any] = {"partitions": {p: {"start_offset": a, "lag": b} for p, (a, b) in sorted(parts.items())}}
    if proc.returncode != 0 or len(parts) != PARTITIONS:
        out["lag"] = None
        out["error"] = f"kafka-share-groups exited {proc.returncode}: " + (proc.stderr.strip() or proc.stdout)[-2000:]
    else:
        try:
            out["lag"] = sum(int(b) for _, b in parts.values())
        except ValueError:  # "-": not known
            out["lag"] = None
    return out


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _log_since(path: Path, offset: int, limit: int = 12_000) -> str:
    """What the broker logged from `offset` on (its last `limit` characters)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")[-limit:]
    except OSError:
        return ""


def measure(broker: Running, log_path: Path, records: int, consumers: list[int], warmup: int) -> dict[str, Any]:
    out: dict[str, Any] = {"settings": broker.settings, "start_s": round(broker.start_s, 1), "runs": []}
    topic = workloads.unique("share-bench")
    workloads.create_topic(broker.bootstrap, topic, PARTITIONS)
    out["topic"] = topic
    cpu0 = cpu_seconds(broker.pid)
    out["produce"] = workloads.producer_perf(broker.bootstrap, topic, records, "1", record_size=RECORD_SIZE)
    out["produce"]["broker_cpu_s"] = round((cpu_seconds(broker.pid) or 0.0) - (cpu0 or 0.0), 3)
    log(f"  {broker.name} produced {records:,}: {out['produce']['records_per_s']:,.0f} records/s")
    if warmup:
        try:
            w = share_read(broker, log_path, topic, min(warmup, records), 1, prefix="bench-share-warmup")
            out["warmup"] = {k: w[k] for k in ("records", "records_per_s", "broker_cpu_s")}
            log(f"  {broker.name} warm-up: {w['records_per_s']:,.0f} records/s")
        except Exception as exc:  # noqa: BLE001 - recorded; the measured reads still run
            out.setdefault("errors", {})["warmup"] = _error(exc)
            log(f"  {broker.name} warm-up FAILED: {exc}")
    for c in consumers:
        try:
            r = share_read(broker, log_path, topic, records, c)
        except Exception as exc:  # noqa: BLE001 - one failed count is reported, the next still runs
            traceback.print_exc(file=sys.stderr)
            out.setdefault("errors", {})[f"{c}c"] = _error(exc)
            log(f"  {broker.name} {c} consumers FAILED: {exc}")
            continue
        try:
            r["lag_check"] = group_lag(broker.bootstrap, r["group"], topic)
        except Exception as exc:  # noqa: BLE001 - the read's figures stand without it
            r["lag_check"] = {"lag": None, "error": f"{type(exc).__name__}: {exc}"}
        out["runs"].append(r)
        log(f"  {broker.name} {c} consumers: {r['records_per_s']:,.0f} records/s, {r['mb_per_s']:.1f} MB/s, "
            f"{r['records']:,} records, broker CPU {r['broker_cpu_s']} s, {r['wall_s']:.1f} s, "
            f"lag after {r['lag_check'].get('lag')}")
    return out


def _error(exc: BaseException) -> dict[str, Any]:
    return {"error": f"{type(exc).__name__}: {exc}", **getattr(exc, "details", {})}


SECTION = "## Share groups (KIP-932 queues)"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "—"


def _num(value: float | None, fmt: str) -> str:
    return format(value, fmt) if value is not None else "—"


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section (bench/run.py splices it in from share_results.json)."""
    warm = (f"after an unmeasured read of {res['warmup']:,} records by a share group of its own (one consumer), "
            if res.get("warmup") else "")
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['cpus']} CPUs, {res['total_s']:.0f} s. Written by "
          f"`bench/share_bench.py`: each broker as bench/run.py starts it, a topic of {PARTITIONS} partitions "
          f"(RF 1), {res['records']:,} records of 1 KiB produced with kafka-producer-perf-test (acks=1); then, "
          f"{warm}for each consumer count a fresh share group with `share.auto.offset.reset=earliest` "
          "(kafka-configs) and Apache Kafka's kafka-share-consumer-perf-test (4.x, full JIT) with `--threads` "
          f"share consumers in one JVM reading all {res['records']:,} records (implicit acknowledgement, "
          f"`--timeout {TOOL_TIMEOUT_MS}`). records/s and MB/s are the tool's, from its start (the group join "
          "included) to the last record; *first record*: when the first one arrived (seconds from the tool's "
          f"start, to within {REPORTING_INTERVAL_MS} ms, from its detailed stats), and *from it*: records/s from "
          "then to the last — a share group's assignment can wait a heartbeat (`group.share.heartbeat.interval.ms`, "
          "5 s on both brokers), which a short read does not amortise. Broker CPU: its user + system seconds over "
          "the tool's run. Consumed: the tool's count, each consumer's share after it (a share group hands each "
          "record to one consumer: all N, once), and the group's lag once they left (kafka-share-groups "
          "`--describe --offsets`: records not acknowledged; 0 when all were). Single machine, the cores "
          "shared with the client JVM; "
          f"`uptime` at start: {res['uptime_start']}.", ""]
    rows = []
    brokers = res["brokers"]
    for name, b in brokers.items():
        for r in b.get("runs", []):
            split = " / ".join(f"{n:,}" for n in r.get("per_consumer", []))
            rows.append([name, str(r["consumers"]), f"{r['records_per_s']:,.0f}", f"{r['mb_per_s']:.1f}",
                         _num(r.get("first_record_s"), ".2f"), _num(r.get("after_first_records_per_s"), ",.0f"),
                         _num(r.get("broker_cpu_s"), ".1f"),
                         f"{r['records']:,}" + ("" if r["complete"] else " (!)")
                         + (f" ({split})" if r["consumers"] > 1 and split else "")
                         + f"; lag {_num((r.get('lag_check') or {}).get('lag'), ',')}"])
        for key, err in (b.get("errors") or {}).items():
            rows.append([name, key.removesuffix("c"), "failed: " + err["error"].replace("|", "\\|")[:200],
                         "", "", "", "", ""])
    md += report._table(["broker", "consumers", "records/s", "MB/s", "first record s", "records/s from it",
                         "broker CPU s", "consumed"], rows)
    t_runs = {r["consumers"]: r for r in brokers.get("tmqgate", {}).get("runs", [])}
    k_runs = {r["consumers"]: r for r in brokers.get("kafka", {}).get("runs", [])}
    both = [c for c in t_runs if c in k_runs]
    if both:
        md += ["", "tmqgate / Kafka (> 1 favours tmqgate; CPU: Kafka's seconds / tmqgate's):", ""]
        md += report._table(["consumers", "records/s", "records/s from the first record", "broker CPU"],
                            [[str(c), _ratio(t_runs[c]["records_per_s"], k_runs[c]["records_per_s"]),
                              _ratio(t_runs[c].get("after_first_records_per_s"),
                                     k_runs[c].get("after_first_records_per_s")),
                              _ratio(k_runs[c].get("broker_cpu_s"), t_runs[c].get("broker_cpu_s"))] for c in both])
    scaling = []
    for name, b in brokers.items():
        one = next((r["records_per_s"] for r in b.get("runs", []) if r["consumers"] == 1), None)
        more = [f"{r['consumers']} consumers {_ratio(r['records_per_s'], one)}×"
                for r in b.get("runs", []) if r["consumers"] != 1]
        if one and more:
            scaling.append(f"{name} " + ", ".join(more))
    if scaling:
        md += ["", "Against the same broker's one-consumer read (records/s): " + "; ".join(scaling) + "."]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.share_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records produced and read per group")
    parser.add_argument("--consumers", default="1,4", help="comma-separated share consumer counts")
    parser.add_argument("--warmup", type=int, default=100_000,
                        help="records of an unmeasured one-consumer share read first (at most --records; 0: none)")
    parser.add_argument("--brokers", default="tmqgate,kafka", help="comma-separated subset of tmqgate,kafka")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / RESULTS_NAME, help="the JSON results file")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' data and logs (printed)")
    args = parser.parse_args(argv)
    consumers = [int(c) for c in args.consumers.split(",")]
    warmup = min(args.warmup, args.records)
    workdir = Path(tempfile.mkdtemp(prefix="tmqgate-sharebench-"))
    res: dict[str, Any] = {"command": ("python -m bench.share_bench "
                                       + " ".join(sys.argv[1:] if argv is None else argv)).strip(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(),
                           "records": args.records, "record_size": RECORD_SIZE, "partitions": PARTITIONS,
                           "consumers": consumers, "warmup": warmup, "kafka_version": kafka_ref.kafka_version(),
                           "uptime_start": uptime(), "brokers": {}}
    t0 = time.perf_counter()
    try:
        for name in args.brokers.split(","):
            log(f"starting {name}")
            try:
                broker = STARTERS[name](workdir / name)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other broker
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"start": _error(exc)}}
                continue
            log(f"{name} ready on {broker.bootstrap} (pid {broker.pid}) in {broker.start_s:.1f}s")
            log_path = workdir / name / LOG_NAMES[name]
            try:
                res["brokers"][name] = measure(broker, log_path, args.records, consumers, warmup)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"run": {**_error(exc), "broker_log": _tail(log_path)}}}
            finally:
                log(f"stopping {name}")
                broker.stop()
    finally:
        if args.keep:
            log(f"broker data and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    res["total_s"] = round(time.perf_counter() - t0, 1)
    res["uptime_end"] = uptime()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    section = markdown(res)
    print(section)
    return 0 if all("errors" not in b for b in res["brokers"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
