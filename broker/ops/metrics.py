"""The broker's metrics, served by the HTTP front as `GET /metrics` (Prometheus text format,
`prometheus-client`), under the names Kafka users' dashboards already use where there is one:

- Kafka's JMX metrics as the Prometheus JMX exporter names them:
  `kafka_server_brokertopicmetrics_bytesin_total{topic}`, `…_bytesout_total{topic}`,
  `…_messagesin_total{topic}` (BrokerTopicMetrics), `kafka_network_requestmetrics_requests_total
  {request,version}` (RequestsPerSec), `kafka_network_requestmetrics_errors_total{request,error}`
  (ErrorsPerSec: the answer's top-level error code, a Produce partition's, a failed handler's),
  `kafka_network_requestmetrics_totaltimems{request}` (TotalTimeMs, a histogram in ms),
  `kafka_server_socket_server_metrics_connection_count{listener}`;
- kafka_exporter's consumer-group series, computed at scrape time from the committed offsets
  and the high watermarks: `kafka_consumergroup_current_offset{consumergroup,topic,partition}`
  and `kafka_consumergroup_lag{…}` (high watermark − committed offset, never below 0). The
  cost is bounded: at most `metrics_max_lag_series` series per scrape (one LevelDB prefix
  scan per group), `kafka_consumergroup_lag_truncated` says when more were left out;
- share groups (KIP-932), as the JMX exporter names Kafka's share-group metrics:
  `kafka_server_share_group_metrics_record_acknowledgement_total{ack_type}` (records settled
  as Accept, Release, Reject, Renew, Gap), `kafka_server_share_group_metrics_share_acknowledgement_total`
  (requests that carried acknowledgements) and
  `kafka_server_group_coordinator_metrics_share_group_count{state}`;
- tmqgate's own (`tmqgate_*`): WAL bytes and entries per vnode, the data directory's size on
  disk (both LevelDBs), entries removed by retention and ranges removed by the archiver, the
  disk guard's shortfall (as /health's `storage`).

Hot paths stay cheap: the counters are plain numbers kept per topic / API version in dicts
(one lookup and a few additions per request and partition, no lock, nothing per record) and
become Prometheus families only at scrape time. Series of a deleted topic are dropped at the next scrape (`prune`).
Storage knows nothing of Prometheus: its figures are read at scrape time. One `Metrics` per broker (its own
registry), reached by the server and the handlers through their contexts.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.schemas import SCHEMAS

if TYPE_CHECKING:
    from tmqgate.broker.auth.session import Authenticator
    from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
    from tmqgate.broker.runtime.log_cleaner import LogCleaner
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.coordinator.coordinator import RebalanceStats
    from tmqgate.storage import Store

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: TotalTimeMs buckets (ms): sub-millisecond answers up to long-polling Fetches.
LATENCY_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class LagRow(NamedTuple):
    group: str
    topic: str
    partition: int
    current_offset: int
    lag: int


def consumer_group_lag(committed: Iterable[tuple[str, Mapping[tuple[str, int], int]]],
                       high_watermark: Callable[[str, int], int | None],
                       limit: int) -> tuple[list[LagRow], bool]:
    """kafka_exporter's lag: per group and partition with a committed offset, the committed
    offset and high watermark − offset (0 when the commit is at or past it). Partitions of a
    topic that no longer exists (`high_watermark` None) are left out. At most `limit` rows;
    the flag says whether some were left out."""
    rows: list[LagRow] = []
    for group, offsets in committed:
        for (topic, partition), offset in sorted(offsets.items()):
            hw = high_watermark(topic, partition)
            if hw is None:
                continue
            if len(rows) >= limit:
                return rows, True
            rows.append(LagRow(group, topic, partition, offset, max(0, hw - offset) if offset >= 0 else hw))
    return rows, False


#: (Kafka resource type, name) → whether the caller may see series labelled with it
Visible = Callable[[str, str], bool]
#: the labels that name a Kafka resource: a series is shown only if each of its is visible
RESOURCE_LABELS = {"topic": "TOPIC", "database": "TOPIC", "consumergroup": "GROUP"}


class _Filtered(Collector):
    """A registry's families with the samples `visible` refuses left out (a family itself
    stays, with its HELP and TYPE: nothing of a hidden name is shown)."""

    def __init__(self, registry: CollectorRegistry, visible: Visible) -> None:
        self._registry = registry
        self._visible = visible

    def collect(self) -> Iterator[Any]:
        visible = self._visible
        for family in self._registry.collect():
            family.samples = [s for s in family.samples
                              if all(visible(RESOURCE_LABELS[k], v) for k, v in s.labels.items()
                                     if k in RESOURCE_LABELS)]
            yield family


class _ScrapeTime(Collector):
    """Every series, built at scrape time: the hot-path counters as they stand, and the figures
    read from the store, the topic registry and the groups' offsets."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self._metrics
        yield from m.counted()
        store, topics = m.store, m.topics
        if store is None or topics is None:
            return
        yield from self._lag(store, topics, m.max_lag_series)
        scanned = CounterMetricFamily("tmqgate_query_rows_scanned",
                                      "Rows a database or TDengine topic's view evaluated for Fetch", labels=["topic"])
        delivered = CounterMetricFamily("tmqgate_query_rows_delivered",
                                        "Records a database or TDengine topic's view delivered", labels=["topic"])
        for name, (n_scanned, n_delivered) in sorted(topics.view_rows.items()):
            scanned.add_metric([name], n_scanned)
            delivered.add_metric([name], n_delivered)
        yield scanned
        yield delivered
        wal_bytes = GaugeMetricFamily("tmqgate_wal_bytes", "Bytes of WAL entries held per vnode",
                                      labels=["database", "vnode"])
        wal_entries = GaugeMetricFamily("tmqgate_wal_entries", "WAL entries held per vnode",
                                        labels=["database", "vnode"])
        for db in store.databases():
            for vnode in range(db.vgroups):
                labels = [db.name, str(vnode)]
                wal_bytes.add_metric(labels, store.log_size(db.name, vnode))
                wal_entries.add_metric(labels, store.log_entries(db.name, vnode))
        yield wal_bytes
        yield wal_entries
        yield GaugeMetricFamily("tmqgate_leveldb_size_bytes",
                                "Bytes on disk of the data directory (both LevelDBs)", value=_du(store.path))
        shortfall = store.archiver.guard.shortfall
        yield GaugeMetricFamily("tmqgate_disk_guard_shortfall_bytes",
                                "Disk usage above disk_usage_max_percent the archiver cannot remove (0: none)",
                                value=0 if shortfall is None else max(0, shortfall["used_bytes"]
                                                                      - shortfall["allowed_bytes"]))
        yield GaugeMetricFamily("tmqgate_storage_read_only", "1 while a full disk refuses writes",
                                value=1 if store.read_only else 0)

    @staticmethod
    def _lag(store: Store, topics: TopicRegistry, limit: int) -> Iterator[Any]:
        def high_watermark(name: str, partition: int) -> int | None:
            topic = topics.get(name)
            if topic is None or not 0 <= partition < topic.partitions:
                return None
            return topic.high_watermark(store, partition)

        committed = ((group, {tp: c.offset for tp, c in store.fetch_offsets(group).items()})
                     for group in store.offset_groups())
        rows, truncated = consumer_group_lag(committed, high_watermark, limit)
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset of a consumer group for a partition", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus the group's committed offset", labels=labels)
        for row in rows:
            key = [row.group, row.topic, str(row.partition)]
            current.add_metric(key, row.current_offset)
            lag.add_metric(key, row.lag)
        yield current
        yield lag
        yield GaugeMetricFamily("kafka_consumergroup_lag_truncated",
                                "1 when metrics_max_lag_series left some partitions out", value=int(truncated))


def _du(path: str) -> int:
    """Bytes of the regular files under `path` (the two LevelDBs and their logs)."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def _api_name(api_key: int) -> str:
    return SCHEMAS[api_key].name


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ShareFigures(Protocol):
    """What the share groups count (broker/runtime/shares.py), read at scrape."""

    acknowledged: dict[str, int]
    acknowledgements: int

    def group_states(self) -> dict[str, int]: ...


class Metrics:
    """One broker's metrics (see the module docstring). `store`/`topics` are read at scrape
    time only; without them (unit tests) the scrape-time series are left out.

    The hot-path counters are plain numbers in dicts and lists, bumped on the event loop (the
    only thread that counts) and turned into Prometheus families at scrape time: a Produce
    costs two dict lookups and a few additions, nothing per record — prometheus-client's own
    Counter/Histogram take a lock per `inc` (2–3 µs each on a loaded host)."""

    def __init__(self, store: Store | None = None, topics: TopicRegistry | None = None,
                 max_lag_series: int = 10_000, quotas: ClientQuotaManagers | None = None, *,
                 rebalances: RebalanceStats | None = None, log_cleaner: LogCleaner | None = None,
                 authenticator: Authenticator | None = None, shares: ShareFigures | None = None) -> None:
        self.store = store
        self.topics = topics
        self.max_lag_series = max_lag_series
        self.quotas = quotas  # throttles counted by broker/ops/quotas/, read at scrape
        self.authenticator = authenticator  # SASL failures (with a SASL listener)
        self.rebalances = rebalances  # the group coordinator's, read at scrape
        self.shares = shares  # the share groups' counts, read at scrape
        self.log_cleaner = log_cleaner  # broker/runtime/log_cleaner.py's figures, read at scrape
        self.registry = CollectorRegistry(auto_describe=False)
        # topic -> [bytes in, bytes out, messages in]
        self._topic_counts: dict[str, list[int]] = {}
        # (api key, version) -> [requests, total ms, per-bucket counts (the last: +Inf)]
        self._request_counts: dict[tuple[int, int], list[float]] = {}
        self._error_counts: dict[tuple[int, int], int] = {}
        self._connections: dict[str, int] = {}
        self._retention_removed = 0
        self._archiver_removed = 0
        self.registry.register(_ScrapeTime(self))

    # --- hot paths ---------------------------------------------------------------------------

    def produced(self, topic: str, size: int, records: int) -> None:
        """A batch of `records` records, `size` bytes, appended to `topic`."""
        counts = self._topic_counts.get(topic)
        if counts is None:
            counts = self._topic_counts[topic] = [0, 0, 0]
        counts[0] += size
        counts[2] += records

    def fetched(self, topic: str, size: int) -> None:
        """`size` bytes of records sent from `topic`."""
        counts = self._topic_counts.get(topic)
        if counts is None:
            counts = self._topic_counts[topic] = [0, 0, 0]
        counts[1] += size

    def request(self, api_key: int, version: int, elapsed_ms: float) -> None:
        """A request answered (or failed) after `elapsed_ms`."""
        counts = self._request_counts.get((api_key, version))
        if counts is None:
            counts = self._request_counts[(api_key, version)] = [0.0] * (3 + len(LATENCY_BUCKETS_MS))
        counts[0] += 1
        counts[1] += elapsed_ms
        counts[2 + bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)] += 1

    def error(self, api_key: int, code: int) -> None:
        """An error code (not NONE) answered to a request of `api_key`."""
        key = (api_key, int(code))
        self._error_counts[key] = self._error_counts.get(key, 0) + 1

    def connection(self, listener: str, delta: int) -> None:
        self._connections[listener] = self._connections.get(listener, 0) + delta

    # --- housekeeping ----------------------------------------------------------------------

    def retention_removed(self, entries: int) -> None:
        self._retention_removed += entries

    def archiver_removed(self, ranges: int) -> None:
        self._archiver_removed += ranges

    def prune(self, live_topics: Iterable[str]) -> None:
        """Drop the series of topics that no longer exist (a deleted topic's counters)."""
        live = set(live_topics)
        for topic in [t for t in self._topic_counts if t not in live]:
            del self._topic_counts[topic]

    def exposition(self, visible: Visible | None = None) -> bytes:
        """The Prometheus text of every series, stale topics dropped first; with `visible`,
        only the series whose topic, database and group labels it accepts (the HTTP front's
        DESCRIBE filter for its caller, `metrics_acl_filter`)."""
        if self.topics is not None:
            self.prune(t.name for t in self.topics.all())
        return generate_latest(self.registry if visible is None else _Filtered(self.registry, visible))

    # --- scrape ------------------------------------------------------------------------------

    def counted(self) -> Iterator[Any]:
        """The hot-path counters as Prometheus families."""
        topic_families = [
            CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin", "Bytes produced to a topic",
                                labels=["topic"]),
            CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout", "Bytes of records fetched from a topic",
                                labels=["topic"]),
            CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", "Records produced to a topic",
                                labels=["topic"])]
        for topic, counts in list(self._topic_counts.items()):
            for family, n in zip(topic_families, counts, strict=True):
                family.add_metric([topic], n)
        yield from topic_families
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, per API and version", labels=["request", "version"])
        latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                        "Time from a request's arrival to its answer, in ms", labels=["request"])
        by_api: dict[int, list[float]] = {}
        for (api_key, version), per_version in sorted(self._request_counts.items()):
            requests.add_metric([_api_name(api_key), str(version)], per_version[0])
            merged = by_api.setdefault(api_key, [0.0] * len(per_version))
            for i, count in enumerate(per_version):
                merged[i] += count
        for api_key, per_api in by_api.items():
            cumulative, buckets = 0.0, []
            for bound, in_bucket in zip((*LATENCY_BUCKETS_MS, float("inf")), per_api[2:], strict=True):
                cumulative += in_bucket
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            latency.add_metric([_api_name(api_key)], buckets, per_api[1])
        yield requests
        yield latency
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes answered, per API",
                                     labels=["request", "error"])
        for (api_key, code), n in sorted(self._error_counts.items()):
            errors.add_metric([_api_name(api_key), _error_name(code)], n)
        yield errors
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open connections per listener", labels=["listener"])
        for listener, n in sorted(self._connections.items()):
            connections.add_metric([listener], n)
        yield connections
        if self.quotas is not None:
            throttled = CounterMetricFamily("tmqgate_quota_throttled", "Requests throttled by a client quota",
                                            labels=["quota"])
            throttle_ms = CounterMetricFamily("tmqgate_quota_throttle_time_ms",
                                              "Throttle time given by a client quota, in ms", labels=["quota"])
            for kind, manager in (("Produce", self.quotas.produce), ("Fetch", self.quotas.fetch),
                                  ("Request", self.quotas.request),
                                  ("ControllerMutation", self.quotas.controller_mutation)):
                throttled.add_metric([kind], manager.stats.throttled)
                throttle_ms.add_metric([kind], manager.stats.throttle_ms)
            yield throttled
            yield throttle_ms
        if self.shares is not None:
            records = CounterMetricFamily("kafka_server_share_group_metrics_record_acknowledgement",
                                          "Records acknowledged by share consumers, per type", labels=["ack_type"])
            for kind in ("Accept", "Release", "Reject", "Renew", "Gap"):
                records.add_metric([kind], self.shares.acknowledged.get(kind, 0))
            yield records
            yield CounterMetricFamily("kafka_server_share_group_metrics_share_acknowledgement",
                                      "ShareFetch and ShareAcknowledge requests that carried acknowledgements",
                                      value=self.shares.acknowledgements)
            groups = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                       "Share groups coordinated here, per state", labels=["state"])
            states = self.shares.group_states()
            for state in ("Empty", "Stable", "Dead"):
                groups.add_metric([state.lower()], states.get(state, 0))
            yield groups
        if self.rebalances is not None:
            stats = self.rebalances
            completed = CounterMetricFamily("tmqgate_group_rebalances", "Rebalances completed (the group Stable again)",
                                            labels=["protocol"])
            took = CounterMetricFamily("tmqgate_group_rebalance_time_ms",
                                       "Total time of the completed rebalances, from their start to Stable, in ms",
                                       labels=["protocol"])
            abandoned = CounterMetricFamily("tmqgate_group_rebalances_abandoned",
                                            "Rebalances that ended with the group Empty or Dead", labels=["protocol"])
            for kind in ("classic", "consumer"):
                completed.add_metric([kind], stats.completed.get(kind, 0))
                took.add_metric([kind], stats.total_ms.get(kind, 0))
                abandoned.add_metric([kind], stats.abandoned.get(kind, 0))
            yield completed
            yield took
            yield abandoned
        failed = CounterMetricFamily("kafka_server_socket_server_metrics_failed_authentication",
                                     "Failed SASL authentications per listener", labels=["listener"])
        if self.authenticator is not None:
            for listener, n in sorted(self.authenticator.failures.items()):
                failed.add_metric([listener], n)
        yield failed
        yield CounterMetricFamily("tmqgate_retention_removed_entries", "WAL entries removed by retention",
                                  value=self._retention_removed)
        yield CounterMetricFamily("tmqgate_archiver_removed_ranges",
                                  "WAL ranges removed by the archiver to stay within the disk limits",
                                  value=self._archiver_removed)
        if self.log_cleaner is not None:  # Kafka's kafka.log:type=LogCleaner gauges, and byte counts
            figures = self.log_cleaner.metrics()
            yield GaugeMetricFamily("kafka_log_logcleaner_max_clean_time_secs",
                                    "The longest cleaning of a compacted vnode so far, in seconds",
                                    value=figures["max_clean_time_secs"])
            yield GaugeMetricFamily("kafka_log_logcleaner_cleaner_recopy_percent",
                                    "Bytes written by the cleaner as a percentage of the bytes it read",
                                    value=figures["cleaner_recopy_percent"])
            yield CounterMetricFamily("tmqgate_log_cleaner_read_bytes", "Bytes of WAL entries the cleaner read",
                                      value=figures["bytes_read"])
            yield CounterMetricFamily("tmqgate_log_cleaner_written_bytes",
                                      "Bytes of rewritten batches the cleaner wrote", value=figures["bytes_written"])
