"""Throughput over secured listeners against PLAINTEXT, both brokers in one run:
`python -m bench.security_bench [--records N] [--brokers tmqgate,kafka] [--profile]`.

Each broker is started once with a PLAINTEXT, an SSL and a SASL_SSL listener
(compat_tests/secure.py; `SECURITIES`), certificates made at start
(compat_tests/certs.py), the SSL client presenting a certificate the broker checks (mutual
TLS), the SASL_SSL client a SCRAM-SHA-512 user. Against each listener,
in turn: kafka-producer-perf-test (1 KiB records, acks=1, into a 4-partition topic, bench/
workloads.py's settings) then kafka-consumer-perf-test over the same records, with the
listener's `--command-config`; the broker's CPU seconds are sampled around each run. An
unmeasured warm-up over PLAINTEXT comes first; `--rounds` repeats the listener sequence and
keeps each figure's median. Results: `security_results.json` and the section "Over TLS /
SASL_SSL" of RESULTS.md (replaced in place), as ratios to PLAINTEXT on the same broker.
`--profile` attaches py-spy to tmqgate over SSL (PROFILE_TLS.md). Nothing asserts timings.
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

from bench import pyspy, report, workloads
from bench.procstats import ResourceSampler
from bench.run import KAFKA_HEAP_OPTS, TMQGATE_CONFIG, log
from compat_tests.certs import Certs, make_certs, tls_config
from compat_tests.client_security import ClientSecurity

BENCH_DIR = Path(__file__).resolve().parent
SECTION = "## Over TLS / SASL_SSL"
USER, PASSWORD = "bench", "bench-secret"
# The SSL client presents its certificate and the broker checks it; "requested" rather than
# "required" because tmqgate's TLS listeners share one policy, and SASL_SSL clients have none.
CLIENT_AUTH = "requested"


SECURITIES = ("PLAINTEXT", "SSL", "SASL_SSL")


def _listeners() -> dict[str, str]:
    return {s: s for s in SECURITIES if s != "PLAINTEXT"}


@dataclass
class Secured:
    name: str
    pid: int
    ports: dict[str, int]
    stop: Callable[[], None]


def start_tmqgate(workdir: Path, certs: Certs) -> Secured:
    from compat_tests import secure
    from compat_tests.brokers import TmqgateProcess

    config = {**TMQGATE_CONFIG, **tls_config("tmqgate", certs, CLIENT_AUTH),
              **secure.tmqgate_sasl_config(("SCRAM-SHA-512",), 0)}
    proc = TmqgateProcess(workdir, config=config, extra_listeners=_listeners(), ready_timeout=120)
    proc.start()
    assert proc.proc is not None
    secure.add_scram_user(proc.bootstrap, USER, PASSWORD, ("SCRAM-SHA-512",))
    return Secured("tmqgate", proc.proc.pid, proc.listener_ports, proc.stop)


def start_kafka(workdir: Path, certs: Certs) -> Secured:
    from compat_tests import kafka_ref, secure

    config = {**tls_config("kafka", certs, CLIENT_AUTH),
              **secure.kafka_sasl_config({USER: PASSWORD}, ("SCRAM-SHA-512",), 0, ("SASL_SSL",))}
    ref = kafka_ref.start_reference_kafka(workdir, extra_config=config, extra_listeners=_listeners(),
                                          heap_opts=KAFKA_HEAP_OPTS, jvm_opts=kafka_ref.FULL_JIT_JVM_OPTS,
                                          ready_timeout=240)
    secure.add_scram_user(ref.bootstrap, USER, PASSWORD, ("SCRAM-SHA-512",))
    return Secured("kafka", ref.pid, ref.listener_ports, ref.stop)


STARTERS = {"tmqgate": start_tmqgate, "kafka": start_kafka}


def client_configs(certs: Certs, out: Path) -> dict[str, str | None]:
    """Each listener's `--command-config` file (None: PLAINTEXT needs none)."""
    configs: dict[str, str | None] = {
        "PLAINTEXT": None,
        "SSL": str(ClientSecurity("SSL", certs, client_cert="client").write_properties(out / "ssl.properties"))}
    if "SASL_SSL" in SECURITIES:
        sasl = ClientSecurity("SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=USER, password=PASSWORD)
        configs["SASL_SSL"] = str(sasl.write_properties(out / "sasl_ssl.properties"))
    return configs


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def measure(broker: Secured, certs: Certs, records: int, rounds: int, warmup: int, workdir: Path,
            profile_dir: Path | None = None) -> dict[str, Any]:
    configs = client_configs(certs, workdir)
    out: dict[str, Any] = {"runs": {s: [] for s in SECURITIES}}
    bootstrap = {s: f"127.0.0.1:{broker.ports[s]}" for s in SECURITIES}
    if warmup:
        topic = workloads.unique("sec-warmup")
        workloads.create_topic(bootstrap["PLAINTEXT"], topic, 4)
        workloads.producer_perf(bootstrap["PLAINTEXT"], topic, warmup, "1")
        workloads.consumer_perf(bootstrap["PLAINTEXT"], topic, warmup)
    for r in range(rounds):
        for security in SECURITIES:
            topic = workloads.unique(f"sec-{security.lower()}")
            workloads.create_topic(bootstrap["PLAINTEXT"], topic, 4)
            run: dict[str, Any] = {}
            for step in ("produce", "consume"):
                spy: Any = None
                if profile_dir is not None and security != "PLAINTEXT" and r == 0:
                    spy = pyspy.PySpy(broker.pid, profile_dir / f"{security.lower()}-{step}.raw.txt")
                    spy.__enter__()
                try:
                    with ResourceSampler(broker.pid) as sampler:
                        if step == "produce":
                            result = workloads.producer_perf(bootstrap[security], topic, records, "1",
                                                             client_config=configs[security])
                        else:
                            result = workloads.consumer_perf(bootstrap[security], topic, records,
                                                             client_config=configs[security])
                finally:
                    if spy is not None:
                        spy.__exit__(None, None, None)
                run[step] = {"mb_per_s": result["mb_per_s"],
                             "records_per_s": result["records_per_s"],
                             "fetch_mb_per_s": result.get("fetch_mb_per_s"),
                             "broker_cpu_s": sampler.usage.cpu_s,
                             "broker_cpu_us_per_record": 1e6 * sampler.usage.cpu_s / records}
                log(f"  {broker.name} {security} {step}: {result['mb_per_s']:.1f} MB/s, "
                    f"broker CPU {sampler.usage.cpu_s:.1f} s")
            out["runs"][security].append(run)
    out["median"] = {
        security: {step: {key: _median([run[step][key] for run in runs if run[step].get(key) is not None])
                          for key in ("mb_per_s", "records_per_s", "fetch_mb_per_s", "broker_cpu_s",
                                      "broker_cpu_us_per_record")}
                   for step in ("produce", "consume")}
        for security, runs in out["runs"].items()}
    return out


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section."""
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['total_s']:.0f} s; {res['records']:,} records of 1 KiB "
          f"per run, median of {res['rounds']} round(s), after {res['warmup']:,} unmeasured records over "
          "PLAINTEXT. Written by `bench/security_bench.py`. Each broker has a PLAINTEXT and an SSL listener "
          "(and SASL_SSL when it has SASL); the SSL client presents a certificate the broker checks (mutual "
          "TLS, `ssl_client_auth = requested`, ECDSA P-256, TLS 1.3); the SASL_SSL client authenticates "
          "with SCRAM-SHA-512 (4096 iterations). "
          "Producer: kafka-producer-perf-test, acks=1, `batch.size=65536 linger.ms=5`, 4 partitions; consumer: "
          "kafka-consumer-perf-test over the same records (MB/s includes the group join). Broker CPU: "
          "its user + system seconds during the run, per record. Single machine, 2 cores shared with the "
          f"clients; 1-minute load at start {res['load_at_start']:.2f}.", ""]
    rows = []
    for name, b in res["brokers"].items():
        if "median" not in b:
            rows.append([name, "—", "failed: " + "; ".join(b.get("errors", {}).values()), "", "", "", "", ""])
            continue
        med = b["median"]
        plain = med["PLAINTEXT"]
        for security in [s for s in ("PLAINTEXT", "SSL", "SASL_SSL") if s in med]:
            m = med[security]
            ratio_p = m["produce"]["mb_per_s"] / plain["produce"]["mb_per_s"] if plain["produce"]["mb_per_s"] else 0
            ratio_c = m["consume"]["mb_per_s"] / plain["consume"]["mb_per_s"] if plain["consume"]["mb_per_s"] else 0
            rows.append([name, security,
                         f"{m['produce']['mb_per_s']:.1f}", f"{ratio_p:.2f}",
                         f"{m['consume']['mb_per_s']:.1f}", f"{ratio_c:.2f}",
                         f"{m['produce']['broker_cpu_us_per_record']:.1f}",
                         f"{m['consume']['broker_cpu_us_per_record']:.1f}"])
    md += report._table(["broker", "listener", "produce MB/s", "× PLAINTEXT", "consume MB/s", "× PLAINTEXT",
                         "broker CPU µs/record produced", "µs/record consumed"], rows)
    profile = res.get("profile")
    if profile:
        md += ["", "tmqgate's event loop over SSL, py-spy (`--profile`, first round; own time, % of busy "
               "samples; PROFILE_TLS.md has more):", ""]
        for label, top in profile.items():
            md.append(f"- {label}: " + ", ".join(f"`{frame.split(' (')[0]}` {share:.0f}%" for share, frame in top))
    notes = res.get("notes")
    if notes:
        md += ["", *notes]
    return "\n".join(md) + "\n"


def profile_top(prof_dir: Path, n: int = 6) -> dict[str, list[tuple[float, str]]]:
    out: dict[str, list[tuple[float, str]]] = {}
    for path in sorted(prof_dir.glob("*.raw.txt")):
        _samples, own, _total = pyspy.top_entries(path, n + 1)
        out[path.name.removesuffix(".raw.txt")] = [(e.busy_share * 100, e.frame) for e in own
                                                   if not e.frame.startswith(pyspy.WAITING)][:n]
    return out


def splice(results_md: Path, section: str, heading: str = SECTION) -> None:
    """Replace the section starting at `heading` in RESULTS.md (or append it)."""
    text = results_md.read_text() if results_md.exists() else ""
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("\n" + text[nxt + 1:] if nxt >= 0 else "")
    results_md.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.security_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per run (default: quick mode's)")
    parser.add_argument("--warmup", type=int, default=100_000, help="unmeasured records first, over PLAINTEXT")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--brokers", default="tmqgate,kafka")
    parser.add_argument("--profile", action="store_true", help="py-spy on tmqgate over the secured listeners")
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tmqgate-secbench-"))
    certs = make_certs(workdir / "certs")
    res: dict[str, Any] = {"command": "python -m bench.security_bench " + " ".join(argv or sys.argv[1:]),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "records": args.records,
                           "rounds": args.rounds, "warmup": args.warmup, "load_at_start": os.getloadavg()[0],
                           "brokers": {}}
    t0 = time.perf_counter()
    try:
        for name in args.brokers.split(","):
            log(f"starting {name} with PLAINTEXT and SSL listeners")
            try:
                broker = STARTERS[name](workdir / name, certs)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other broker
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"start": f"{type(exc).__name__}: {exc}"}}
                continue
            try:
                prof = args.out / "profiles" / "tls" if args.profile and name == "tmqgate" else None
                res["brokers"][name] = measure(broker, certs, args.records, args.rounds, args.warmup,
                                               workdir, prof)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                res["brokers"][name] = {"errors": {"run": f"{type(exc).__name__}: {exc}"}}
            finally:
                broker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res["total_s"] = time.perf_counter() - t0
    if args.profile:
        res["profile"] = profile_top(args.out / "profiles" / "tls")
    (args.out / "security_results.json").write_text(json.dumps(res, indent=1) + "\n")
    section = markdown(res)
    splice(args.out / "RESULTS.md", section)
    print(section)
    if args.profile:
        prof = args.out / "profiles" / "tls"
        lines = ["# tmqgate over TLS: py-spy", "", f"`{res['command']}`, {res['started']}.", ""]
        for path in sorted(prof.glob("*.raw.txt")):
            samples, own, _total = pyspy.top_entries(path, 12)
            lines += [f"## {path.name} ({samples} samples)", "", "| own % of busy | frame |", "|---|---|"]
            lines += [f"| {e.busy_share * 100:.1f} | `{e.frame}` |" for e in own]
            lines.append("")
        (args.out / "PROFILE_TLS.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
