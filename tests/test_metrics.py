"""broker/ops/metrics.py: kafka_exporter's lag computed from committed offsets and high watermarks,
its bound, a deleted topic's series dropped, and the scrape-time storage figures read from a
real store."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tmqgate.broker.ops.metrics import LagRow, Metrics, consumer_group_lag
from tmqgate.broker.tdengine import TsdbCatalog
from tmqgate.broker.topics import TopicRegistry
from tmqgate.protocol.records import build_batch
from tmqgate.storage import Store


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_lag_is_high_watermark_minus_committed() -> None:
    hws = {("t", 0): 10, ("t", 1): 5, ("u", 0): 3}
    committed = [("g1", {("t", 0): 4, ("t", 1): 5}), ("g2", {("u", 0): 7, ("gone", 0): 2})]
    rows, truncated = consumer_group_lag(committed, lambda t, p: hws.get((t, p)), 100)
    assert rows == [LagRow("g1", "t", 0, 4, 6), LagRow("g1", "t", 1, 5, 0),
                    # committed past the high watermark (records deleted and rewritten): 0, not -4
                    LagRow("g2", "u", 0, 7, 0)]  # a deleted topic's partition: no series
    assert truncated is False


def test_lag_series_are_bounded() -> None:
    committed = [(f"g{i}", {("t", p): 0 for p in range(10)}) for i in range(10)]
    rows, truncated = consumer_group_lag(committed, lambda t, p: 1, 25)
    assert len(rows) == 25 and truncated is True


def test_deleted_topic_series_are_dropped() -> None:
    metrics = Metrics()
    metrics.produced("a", 100, 3)
    metrics.produced("b", 50, 1)
    metrics.fetched("a", 70)
    samples = _samples(metrics)
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "a"),))] == 3
    assert samples[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "a"),))] == 70
    metrics.prune({"b"})
    samples = _samples(metrics)
    assert not [k for k in samples if ("topic", "a") in k[1]]
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "b"),))] == 50
    metrics.produced("a", 10, 1)  # a topic of the same name made again starts from zero
    assert _samples(metrics)[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "a"),))] == 1


def test_a_filtered_scrape_leaves_out_hidden_names() -> None:
    """The HTTP front's DESCRIBE filter (metrics_acl_filter): a series is shown only if each of
    its topic / database / group labels is visible; the broker's own series stay."""
    metrics = Metrics()
    metrics.produced("a", 100, 3)
    metrics.produced("b", 50, 1)
    metrics.request(0, 9, 1.0)
    text = metrics.exposition(lambda resource_type, name: (resource_type, name) == ("TOPIC", "a")).decode()
    samples = {(s.name, tuple(sorted(s.labels.items())))
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert ("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "a"),)) in samples
    assert not [k for k in samples if ("topic", "b") in k[1]]
    assert ("kafka_network_requestmetrics_requests_total", (("request", "Produce"), ("version", "9"))) in samples


def test_requests_errors_and_connections() -> None:
    metrics = Metrics()
    metrics.request(0, 9, 1.5)
    metrics.request(0, 9, 3.0)
    metrics.request(18, 3, 0.1)
    metrics.error(0, 3)
    metrics.error(0, 9999)  # a code tmqgate does not name is labelled by its number
    metrics.connection("PLAINTEXT", 1)
    metrics.connection("PLAINTEXT", 1)
    metrics.connection("PLAINTEXT", -1)
    s = _samples(metrics)
    assert s[("kafka_network_requestmetrics_requests_total", (("request", "Produce"), ("version", "9")))] == 2
    assert s[("kafka_network_requestmetrics_requests_total", (("request", "ApiVersions"), ("version", "3")))] == 1
    assert s[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))] == 2
    assert s[("kafka_network_requestmetrics_totaltimems_sum", (("request", "Produce"),))] == 4.5
    assert s[("kafka_network_requestmetrics_errors_total",
              (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Produce")))] == 1
    assert s[("kafka_network_requestmetrics_errors_total", (("error", "9999"), ("request", "Produce")))] == 1
    assert s[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] == 1


def test_scrape_reads_the_store(tmp_path: Path) -> None:
    with Store(str(tmp_path / "data")) as store:
        topics = TopicRegistry(store, TsdbCatalog(store))
        topics.create("t", 2, {})
        batch = build_batch([(None, b"v", [], 1_700_000_000_000), (None, b"w", [], 1_700_000_000_000)])
        for _ in range(3):
            store.append("t", 1, batch, 2, 1_700_000_000_000)
        store.commit_offset("g", "t", 1, 2)
        store.commit_offset("g", "gone", 0, 2)  # a committed offset of a topic deleted since
        metrics = Metrics(store, topics, max_lag_series=100)
        s = _samples(metrics)
    assert s[("kafka_consumergroup_lag", (("consumergroup", "g"), ("partition", "1"), ("topic", "t")))] == 4
    assert s[("kafka_consumergroup_current_offset",
              (("consumergroup", "g"), ("partition", "1"), ("topic", "t")))] == 2
    assert not [k for k in s if ("topic", "gone") in k[1]]
    assert s[("kafka_consumergroup_lag_truncated", ())] == 0
    assert s[("tmqgate_wal_entries", (("database", "t"), ("vnode", "1")))] == 3
    assert s[("tmqgate_wal_bytes", (("database", "t"), ("vnode", "1")))] >= 3 * len(batch)
    assert s[("tmqgate_wal_entries", (("database", "t"), ("vnode", "0")))] == 0
    assert s[("tmqgate_leveldb_size_bytes", ())] > 0
    assert s[("tmqgate_disk_guard_shortfall_bytes", ())] == 0


def test_rebalances_and_auth_failures_exported() -> None:
    from tmqgate.coordinator.coordinator import RebalanceStats

    metrics = Metrics(rebalances=RebalanceStats(completed={"classic": 2}, total_ms={"classic": 31},
                                                abandoned={"consumer": 1}))
    s = _samples(metrics)
    assert s[("tmqgate_group_rebalances_total", (("protocol", "classic"),))] == 2
    assert s[("tmqgate_group_rebalance_time_ms_total", (("protocol", "classic"),))] == 31
    assert s[("tmqgate_group_rebalances_abandoned_total", (("protocol", "consumer"),))] == 1
    assert s[("tmqgate_group_rebalances_total", (("protocol", "consumer"),))] == 0


def test_grafana_dashboard_uses_only_served_names(tmp_path: Path) -> None:
    """deploy/grafana's dashboard cannot drift from what /metrics serves: every metric name in
    its queries is one a scrape of a real broker's Metrics holds."""
    import json
    import re

    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
    from tmqgate.coordinator.coordinator import RebalanceStats

    dashboard = json.loads((Path(__file__).parent.parent / "deploy/grafana/tmqgate-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(?:kafka|tmqgate)_[a-z_]+", e)}
    with Store(str(tmp_path / "data")) as store:
        topics = TopicRegistry(store, TsdbCatalog(store))
        metrics = Metrics(store, topics, quotas=ClientQuotaManagers(store, BrokerConfig(data_dir=str(tmp_path))),
                          rebalances=RebalanceStats())
        metrics.request(0, 9, 1.0)
        metrics.produced("t", 1, 1)
        text = metrics.exposition().decode()
    served = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    served |= set(re.findall(r"^# TYPE (\S+)", text, re.M)) | {n + "_total" for n in re.findall(r"^# TYPE (\S+)",
                                                                                                   text, re.M)}
    assert used and used <= served, sorted(used - served)
