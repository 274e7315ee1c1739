"""broker/workers.py's `worker_config`: what each worker of `serve --workers N` is told."""

from __future__ import annotations

import pytest

from tmqgate.broker.configs.config import BrokerConfig, ConfigError
from tmqgate.broker.workers import worker_config


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
