"""`python -m bench.run --smoke` runs end to end and writes its results.

Only the benchmark's smallest mode (5,000 records, tmqgate only, well under a minute): it
checks that the command works and that RESULTS.md has every section, never a timing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat_tests.helpers import require_module
from compat_tests.kafka_ref import require_jars

ROOT = Path(__file__).resolve().parent.parent

SECTIONS = (
    "## Machine and load",
    "## Versions",
    "## Settings",
    "## 1. Producer throughput",
    "## 2. Consumer throughput",
    "## 3. End-to-end latency",
    "## 4. Query topics (tmqgate only)",
    "## 5. Rebalance",
    "## 6. Broker CPU and memory",
)


@pytest.mark.timeout(300)
def test_bench_smoke(tmp_path: Path) -> None:
    require_jars()  # the Kafka perf tools
    require_module("confluent_kafka")
    chart = importlib.util.find_spec("matplotlib") is not None
    cmd = [sys.executable, "-m", "bench.run", "--smoke", "--out", str(tmp_path),
           "--workdir", str(tmp_path / "data")] + ([] if chart else ["--no-chart"])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-4000:]

    text = (tmp_path / "RESULTS.md").read_text()
    for section in SECTIONS:
        assert section in text, f"{section!r} missing from RESULTS.md:\n{text}"
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["brokers"]) == ["tmqgate"]
    tmqgate = results["brokers"]["tmqgate"]
    assert tmqgate["produce_acks_1"]["records"] == 5000, tmqgate.get("errors")
    assert tmqgate["consume"]["records"] == 5000, tmqgate.get("errors")
    assert set(tmqgate["resources"]) == {"produce_acks_1", "produce_acks_all", "consume"}
    if chart:
        assert (tmp_path / "results.png").stat().st_size > 0
    assert not (tmp_path / "data").exists()  # broker data removed afterwards


@pytest.mark.timeout(300)
def test_transactions_bench_smoke(tmp_path: Path) -> None:
    """`python -m bench.transactions_e2e` at tiny sizes, tmqgate only: every record produced in
    transactions of 100 is read back read_committed, and the report has its section."""
    require_jars()  # the Kafka perf tools
    require_module("confluent_kafka")
    cmd = [sys.executable, "-m", "bench.transactions_e2e", "--records", "1000", "--warmup", "0",
           "--brokers", "tmqgate", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)})
    assert proc.returncode == 0, proc.stderr[-4000:]

    results = json.loads((tmp_path / "transactions_results.json").read_text())
    assert list(results["brokers"]) == ["tmqgate"]
    tmqgate = results["brokers"]["tmqgate"]
    assert set(tmqgate) == {"baseline", "transactional"}, tmqgate.get("errors")
    txn = tmqgate["transactional"]
    assert txn["produce"]["records"] == 1000 and txn["produce"]["transactions"] == 10
    assert txn["consume"]["records"] == 1000
    assert tmqgate["baseline"]["consume"]["records"] == 1000
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## Transactions" in text
    assert "| tmqgate | transactional |" in text


@pytest.mark.timeout(300)
def test_workers_bench_smoke(tmp_path: Path) -> None:
    """`python -m bench.workers_bench` at one round of 1 s, both producer clients (the franz-go one
    is the suite's Go program in mode `produce`): every cell gained records, none failed, the two
    workers of `--workers 2` both took writes (the topic's leaders spread), and the section has
    a row per cell."""
    require_module("confluent_kafka")
    from compat_tests.go_client import program

    program()  # built (scripts/install_go_client.sh), else the missing dependency
    out = tmp_path / "workers.json"
    cmd = [sys.executable, "-m", "bench.workers_bench", "--workers", "1,2", "--rounds", "1", "--seconds", "1",
           "--clients", "confluent-kafka,franz-go", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)})
    assert proc.returncode == 0, proc.stderr[-4000:]

    from bench.workers_bench import markdown

    res = json.loads(out.read_text())
    cells = [(r["client"], r["workers"], r["producers"]) for r in res["results"]]
    assert cells == [("confluent-kafka", 1, 2), ("confluent-kafka", 2, 2), ("franz-go", 1, 2), ("franz-go", 2, 2)]
    for r in res["results"]:
        assert r["records"] > 0 and r["failed"] == 0, r
        assert r["partitions"] == 8, r
        busy = [c for c in r["worker_cpu_s"] if c >= 0.05]
        assert len(busy) == r["workers"], r  # each worker served its share of the partitions
    assert set(res["ceilings"]) == {"confluent-kafka", "franz-go"}
    text = markdown(res)
    for client in ("confluent-kafka", "franz-go"):
        assert f"| {client} | 1 | 2 |" in text and f"| {client} | 2 | 2 |" in text, text
