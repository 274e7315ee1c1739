"""broker/workers.py: how many workers `tmqgate serve` runs (`resolve`), what each is told
(`worker_config`), and how their `/metrics` merge."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig, ConfigError
from tmqgate.broker.workers import cores, resolve, worker_config


def test_each_worker_is_a_broker_of_its_own_on_the_ports_plus_its_index() -> None:
    base = BrokerConfig(listen="127.0.0.1:9092", http="127.0.0.2:6041", data_dir="/srv/tmq", node_id=10,
                        listeners=["PLAINTEXT://127.0.0.1:9092", "SASL_PLAINTEXT://0.0.0.0:0"],
                        advertised_listeners=["PLAINTEXT://kafka.example:19092", "SASL_PLAINTEXT://kafka.example"],
                        listener_security_protocol_map={}, sasl_enabled_mechanisms=["PLAIN"])
    w = [worker_config(base, i, 3) for i in range(3)]
    assert [c.node_id for c in w] == [10, 11, 12]
    assert [c.data_dir for c in w] == ["/srv/tmq/worker-0", "/srv/tmq/worker-1", "/srv/tmq/worker-2"]
    assert {c.cluster for c in w} == {"local:/srv/tmq/cluster.db"}
    assert [c.listen for c in w] == ["127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094"]
    assert [c.http for c in w] == ["127.0.0.2:6041", "127.0.0.2:6042", "127.0.0.2:6043"]
    assert w[2].listeners == ["PLAINTEXT://127.0.0.1:9094", "SASL_PLAINTEXT://0.0.0.0:0"]  # port 0 stays 0
    assert w[1].advertised_listeners == ["PLAINTEXT://kafka.example:19093", "SASL_PLAINTEXT://kafka.example"]
    assert base.node_id == 10 and base.cluster is None  # the given settings are left as they were


def test_the_state_topics_fit_the_workers_and_an_etcd_cluster_is_kept() -> None:
    base = BrokerConfig(cluster="etcd://10.0.0.1:2379")
    two = worker_config(base, 1, 2)
    assert two.cluster == "etcd://10.0.0.1:2379"
    assert (two.offsets_topic_replication_factor, two.transaction_state_log_replication_factor,
            two.transaction_state_log_min_isr) == (2, 2, 2)
    one = worker_config(BrokerConfig(), 0, 1)
    assert (one.offsets_topic_replication_factor, one.transaction_state_log_min_isr) == (1, 1)
    many = worker_config(BrokerConfig(), 5, 8)
    assert (many.offsets_topic_replication_factor, many.transaction_state_log_replication_factor,
            many.transaction_state_log_min_isr) == (3, 3, 2)  # Kafka's defaults once there are 3


def test_a_worker_node_id_past_the_cluster_limit_is_refused() -> None:
    from tmqgate.storage.producers import PRODUCER_ID_STRIDE

    with pytest.raises(ConfigError, match="node_id"):
        worker_config(BrokerConfig(node_id=PRODUCER_ID_STRIDE - 1), 1, 2)


def test_how_many_workers(tmp_path: Path) -> None:
    """`workers` 0 (the default): one per core on a new data directory; a single broker's data
    directory stays one broker, a directory of k workers at least k; `cluster` set: one. An
    explicit number the directory cannot take is refused before anything starts."""
    fresh = BrokerConfig(data_dir=str(tmp_path / "new"))
    assert resolve(fresh, machine_cores=16) == 16
    assert resolve(replace(fresh, workers=3), machine_cores=16) == 3
    assert resolve(replace(fresh, cluster="etcd://127.0.0.1:2379"), machine_cores=16) == 1
    assert resolve(replace(fresh, cluster="etcd://127.0.0.1:2379", workers=4), machine_cores=16) == 4
    single = tmp_path / "single"
    single.mkdir()
    (single / "CURRENT").write_text("MANIFEST-000002\n")  # LevelDB's, in the data directory itself
    one = BrokerConfig(data_dir=str(single))
    assert resolve(one, machine_cores=16) == 1
    assert resolve(replace(one, workers=1), machine_cores=16) == 1
    with pytest.raises(ConfigError, match="holds one broker's data; run it with --workers 1"):
        resolve(replace(one, workers=2), machine_cores=16)
    made = tmp_path / "made"
    for i in range(4):
        (made / f"worker-{i}").mkdir(parents=True)
    four = BrokerConfig(data_dir=str(made))
    assert resolve(four, machine_cores=2) == 4  # a smaller machine: still every worker's partitions
    assert resolve(four, machine_cores=8) == 8
    assert resolve(replace(four, workers=6), machine_cores=2) == 6
    with pytest.raises(ConfigError, match=r"holds the data of 4 workers; .* \(give --workers 4 or more\)"):
        resolve(replace(four, workers=3), machine_cores=16)
    with pytest.raises(ConfigError, match="workers = -1 is out of range"):
        BrokerConfig(workers=-1).check()
    assert cores() >= 1


def test_metrics_of_the_workers_merge_as_one_server() -> None:
    """/metrics of `serve --workers N` (broker/ops/metrics_merge.py): the same series on two
    workers is their sum — counters, histogram buckets/count/sum, gauges of what each holds —
    but the largest for a gauge every worker sees alike; series of one worker are kept as they
    are; the workers not reached are counted."""
    from prometheus_client.parser import text_string_to_metric_families

    from tmqgate.broker.ops.metrics_merge import merge

    def worker(messages: float, connections: float, lag: float, read_only: float, topic: str) -> bytes:
        return (f"# HELP kafka_server_brokertopicmetrics_messagesin_total m\n"
                f"# TYPE kafka_server_brokertopicmetrics_messagesin_total counter\n"
                f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{topic}"}} {messages}\n'
                f"# HELP kafka_server_socket_server_metrics_connection_count c\n"
                f"# TYPE kafka_server_socket_server_metrics_connection_count gauge\n"
                f'kafka_server_socket_server_metrics_connection_count{{listener="PLAINTEXT"}} {connections}\n'
                f"# HELP kafka_consumergroup_lag l\n# TYPE kafka_consumergroup_lag gauge\n"
                f'kafka_consumergroup_lag{{consumergroup="g",partition="0",topic="t"}} {lag}\n'
                f"# HELP tmqgate_storage_read_only r\n# TYPE tmqgate_storage_read_only gauge\n"
                f"tmqgate_storage_read_only {read_only}\n"
                f"# HELP kafka_network_requestmetrics_totaltimems t\n"
                f"# TYPE kafka_network_requestmetrics_totaltimems histogram\n"
                f'kafka_network_requestmetrics_totaltimems_bucket{{le="1.0",request="Produce"}} {messages}\n'
                f'kafka_network_requestmetrics_totaltimems_bucket{{le="+Inf",request="Produce"}} {messages}\n'
                f'kafka_network_requestmetrics_totaltimems_count{{request="Produce"}} {messages}\n'
                f'kafka_network_requestmetrics_totaltimems_sum{{request="Produce"}} {messages / 2}\n').encode()

    text = merge([worker(3, 2, 5, 0, "a"), worker(4, 1, 7, 1, "a"), worker(9, 0, 0, 0, "b")], unreached=1)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text.decode()) for s in f.samples}
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "a"),))] == 7
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "b"),))] == 9
    assert got[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] == 3
    assert got[("kafka_consumergroup_lag", (("consumergroup", "g"), ("partition", "0"), ("topic", "t")))] == 7
    assert got[("tmqgate_storage_read_only", ())] == 1
    assert got[("kafka_network_requestmetrics_totaltimems_bucket", (("le", "+Inf"), ("request", "Produce")))] == 16
    assert got[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))] == 16
    assert got[("kafka_network_requestmetrics_totaltimems_sum", (("request", "Produce"),))] == 8
    assert got[("tmqgate_workers_unreached", ())] == 1


def test_a_worker_starts_once_its_killed_predecessor_let_go_of_its_data(tmp_path: Path) -> None:
    """A worker's start waits for the LevelDB lock of its data: a worker of a supervisor killed
    a moment ago may still hold it while the kernel tears it down (the restart then failed)."""
    import subprocess
    import sys

    from tmqgate.broker.workers import _wait_unlocked

    data = tmp_path / "worker-0"
    letting_go = tmp_path / "letting-go"  # written while the lock is still held, just before its release
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, plyvel; db = plyvel.DB(sys.argv[1], create_if_missing=True); print('held', flush=True); "
        "time.sleep(1.5); open(sys.argv[2], 'w').close(); db.close(); time.sleep(30)"), str(data), str(letting_go)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        _wait_unlocked(str(data), timeout=30)
        assert letting_go.exists(), "returned while the lock was held"
        _wait_unlocked(str(tmp_path / "worker-9"))  # a new data directory: nothing to wait for
        assert not (tmp_path / "worker-9").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_worker_whose_supervisor_died_ends_even_if_its_stop_hangs(tmp_path: Path) -> None:
    """The orphan guard of a worker (broker/workers.py): its supervisor killed -9 and its own
    stop never finishing (here: SIGTERM ignored), it still ends, after the grace it gives."""
    import signal
    import subprocess
    import sys

    worker = ("import os, signal, threading, time\n"
              "from tmqgate.broker.workers import _exit_when_orphaned\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "threading.Thread(target=_exit_when_orphaned, args=(os.getppid(), 0.5), daemon=True).start()\n"
              "print('ready', flush=True)\n"
              "time.sleep(120)\n")
    supervisor = ("import subprocess, sys, time\n"
                  f"p = subprocess.Popen([sys.executable, '-c', {worker!r}], stdout=subprocess.PIPE, text=True)\n"
                  "assert p.stdout.readline() == 'ready\\n'\n"
                  "print(p.pid, flush=True)\n"
                  "time.sleep(120)\n")
    sup = subprocess.Popen([sys.executable, "-c", supervisor], stdout=subprocess.PIPE, text=True)
    assert sup.stdout is not None
    child = int(sup.stdout.readline())
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait(10)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the orphaned worker is still running"
        time.sleep(0.1)
