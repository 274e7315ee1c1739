"""`GET /metrics` (issue 13, Metrics): what a Prometheus scrape of a real `tmqgate serve` shows
after real Kafka traffic, under the names Kafka users' dashboards use:

* `kafka_server_brokertopicmetrics_messagesin_total{topic}` rises by exactly the records
  produced to the topic, `…_bytesin_total` by exactly the bytes of the batches produced (the
  batches as sent), `…_bytesout_total` by the bytes fetched back;
* `kafka_network_requestmetrics_requests_total{request,version}` rises by exactly the requests
  sent per API and version;
* `kafka_consumergroup_lag{consumergroup,topic,partition}` (kafka_exporter's) is N after the
  group commits offset 0 of a partition holding N records, and 0 once its consumer has read
  them and committed; `kafka_consumergroup_current_offset` is the committed offset;
* `kafka_server_socket_server_metrics_failed_authentication_total{listener}` counts failed
  SASL authentications; `tmqgate_quota_throttled_total{quota}` and
  `…_throttle_time_ms_total` the throttles a client quota gave;
* with `http_auth = "basic"`, `/metrics` is open by default and takes the credentials with
  `metrics_auth = true`; the Host check (421) applies either way.

Kafka has no HTTP front (its metrics are JMX): tmqgate only.
"""

from __future__ import annotations

import base64
import http.client
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from .helpers import wait_until
from .raw import FETCH_V, PRODUCE_V, RawConn
from .secure import SecureBroker, start_secure_broker
from .tdengine_helpers import TdBroker, td_broker_fixture, unique

pytestmark = pytest.mark.tmqgate_only


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-metrics")


def _get(http_addr: str, path: str = "/metrics", headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    host, port = http_addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read().decode()
    finally:
        conn.close()


def scrape(td: TdBroker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape: (name, sorted labels) -> value."""
    status, ctype, text = _get(td.http)
    assert status == 200, (status, text[:300])
    assert ctype.startswith("text/plain"), ctype
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _batch(values: list[bytes]) -> bytes:
    from tmqgate.protocol.records import build_batch

    now = int(time.time() * 1000)
    return build_batch([(None, v, [], now) for v in values])


def test_produce_fetch_and_requests_counted(td: TdBroker) -> None:
    topic = unique("metrics_t")
    admin = KafkaAdminClient(bootstrap_servers=td.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    before = scrape(td)
    batches = [(0, _batch([b"a" * 10, b"b" * 20, b"c" * 30])), (1, _batch([b"d" * 100])),
               (0, _batch([b"e" * 5, b"f" * 5]))]
    with RawConn(td.bootstrap) as conn:
        for partition, batch in batches:
            answer = conn.produce(topic, partition, batch)
            assert answer["error_code"] == 0, answer
        fetched = conn.fetch(topic, 0, 0)
        assert fetched["error_code"] == 0 and fetched["high_watermark"] == 5, fetched
    after = scrape(td)

    def rise(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert rise("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 6
    assert rise("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == sum(len(b) for _, b in batches)
    # partition 0's two batches came back as stored
    assert rise("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == len(batches[0][1]) + len(
        batches[2][1])
    assert rise("kafka_network_requestmetrics_requests_total", request="Produce", version=str(PRODUCE_V)) == 3
    assert rise("kafka_network_requestmetrics_requests_total", request="Fetch", version=str(FETCH_V)) == 1
    # the latency histogram counted the same requests
    assert rise("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 3
    assert value(after, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 0


def test_errors_counted_by_api_and_code(td: TdBroker) -> None:
    before = scrape(td)
    with RawConn(td.bootstrap) as conn:
        answer = conn.produce(unique("metrics_missing"), 0, _batch([b"x"]))
        assert answer["error_code"] == 3, answer  # UNKNOWN_TOPIC_OR_PARTITION
    after = scrape(td)
    rise = (value(after, "kafka_network_requestmetrics_errors_total", request="Produce",
                  error="UNKNOWN_TOPIC_OR_PARTITION")
            - value(before, "kafka_network_requestmetrics_errors_total", request="Produce",
                    error="UNKNOWN_TOPIC_OR_PARTITION"))
    assert rise == 1


def test_consumer_group_lag_falls_to_zero(td: TdBroker) -> None:
    topic = unique("metrics_lag")
    group = unique("metrics_g")
    admin = KafkaAdminClient(bootstrap_servers=td.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    with RawConn(td.bootstrap) as conn:
        for i in range(4):
            assert conn.produce(topic, 0, _batch([b"v%d" % i, b"w%d" % i]))["error_code"] == 0
    n = 8
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=td.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(0, "", -1)})
        samples = scrape(td)
        labels = {"consumergroup": group, "topic": topic, "partition": "0"}
        assert value(samples, "kafka_consumergroup_lag", **labels) == n
        assert value(samples, "kafka_consumergroup_current_offset", **labels) == 0
        got: list[bytes] = []
        wait_until(lambda: got.extend(r.value for recs in consumer.poll(1000).values() for r in recs)
                   or len(got) >= n, 60, what="the consumer reads the topic")
        assert len(got) == n
        consumer.commit()
        samples = scrape(td)
        assert value(samples, "kafka_consumergroup_current_offset", **labels) == n
        assert (("kafka_consumergroup_lag", tuple(sorted(labels.items()))) in samples
                and value(samples, "kafka_consumergroup_lag", **labels) == 0)
    finally:
        consumer.close()


def test_deleted_topic_series_removed(td: TdBroker) -> None:
    topic = unique("metrics_del")
    admin = KafkaAdminClient(bootstrap_servers=td.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        with RawConn(td.bootstrap) as conn:
            assert conn.produce(topic, 0, _batch([b"x"]))["error_code"] == 0
        assert value(scrape(td), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 1
        admin.delete_topics([topic])
    finally:
        admin.close()
    samples = scrape(td)
    assert not [k for k in samples if ("topic", topic) in k[1]]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TdBroker, TdBroker]]:
    """Two brokers with http_auth = "basic": /metrics open (default) and metrics_auth = true."""
    open_ = td_broker_fixture(tmp_path_factory, "td-metrics-open", {"http_auth": "basic"})
    closed = td_broker_fixture(tmp_path_factory, "td-metrics-auth", {"http_auth": "basic", "metrics_auth": True})
    a, b = next(open_), next(closed)
    try:
        yield a, b
    finally:
        for gen in (open_, closed):
            with pytest.raises(StopIteration):
                next(gen)


def test_metrics_auth_setting(secured: tuple[TdBroker, TdBroker]) -> None:
    open_, closed = secured
    assert _get(open_.http)[0] == 200
    assert _get(open_.http, "/log-history")[0] == 401  # the rest of the front still asks
    status, _, body = _get(closed.http)
    assert status == 401 and "kafka_" not in body, (status, body[:200])
    bad = base64.b64encode(b"nobody:wrong").decode()
    assert _get(closed.http, headers={"Authorization": f"Basic {bad}"})[0] == 401
    # the Host check applies to /metrics as to every path
    assert _get(open_.http, headers={"Host": "evil.example:80"})[0] == 421


@pytest.fixture(scope="module")
def sasl_td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    sb = start_secure_broker("tmqgate", tmp_path_factory.mktemp("td-metrics-sasl"),
                             mechanisms=("SCRAM-SHA-512", "PLAIN"))
    try:
        yield sb
    finally:
        sb.proc.stop()


def _scrape_proc(sb: SecureBroker) -> dict:
    class _Http:  # scrape() needs only `.http`
        http = f"127.0.0.1:{sb.proc.http_port}"  # type: ignore[attr-defined]

    return scrape(_Http())  # type: ignore[arg-type]


def test_failed_authentications_counted_per_listener(sasl_td: SecureBroker) -> None:
    before = _scrape_proc(sasl_td)
    for password in ("wrong", "also-wrong"):
        with RawConn(sasl_td.sasl_bootstrap) as c:
            assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            body = c.request(36, 2, {"auth_bytes": b"\0alice\0" + password.encode()})
            assert body["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
    after = _scrape_proc(sasl_td)
    name = "kafka_server_socket_server_metrics_failed_authentication_total"
    assert value(after, name, listener="SASL_PLAINTEXT") - value(before, name, listener="SASL_PLAINTEXT") == 2


def test_quota_throttles_counted(sasl_td: SecureBroker) -> None:
    client_id = unique("metrics-quota")
    topic = unique("metrics_q")
    with RawConn(sasl_td.bootstrap) as c:
        body = c.request(49, 1, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "client-id", "entity_name": client_id}],
             "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}]})
        assert body["entries"][0]["error_code"] == 0, body
        body = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout_ms": 30000, "validate_only": False})
        assert body["topics"][0]["error_code"] == 0, body
    before = _scrape_proc(sasl_td)
    with RawConn(sasl_td.bootstrap, client_id=client_id) as c:
        body = c.request(0, PRODUCE_V, {"transactional_id": None, "acks": 1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": _batch([b"q" * 200_000])}]}]})
        assert body["responses"][0]["partition_responses"][0]["error_code"] == 0, body
        assert body["throttle_time_ms"] > 0, body
    after = _scrape_proc(sasl_td)
    assert (value(after, "tmqgate_quota_throttled_total", quota="Produce")
            - value(before, "tmqgate_quota_throttled_total", quota="Produce")) == 1
    assert (value(after, "tmqgate_quota_throttle_time_ms_total", quota="Produce")
            - value(before, "tmqgate_quota_throttle_time_ms_total", quota="Produce")) == body["throttle_time_ms"]


def test_query_topic_rows_scanned_and_delivered(td: TdBroker) -> None:
    """A query topic over 4 rows whose filter passes 2: a Fetch of it scans 4 rows and
    delivers 2 records."""
    db = unique("metrics_db")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    td.sql(f"CREATE STABLE {db}.meters (ts TIMESTAMP, current FLOAT) TAGS (location BINARY(16))")
    td.sql(f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('SF') VALUES (1000, 1.5) (2000, 2.5) (3000, 0.5) (4000, 3.5)")
    topic = f"{db}_q"
    td.sql(f"CREATE TOPIC {topic} AS SELECT ts, current FROM {db}.meters WHERE current > 2")
    before = scrape(td)
    with RawConn(td.bootstrap) as conn:
        fetched = conn.fetch(topic, 0, 0)
        assert fetched["error_code"] == 0, fetched
    after = scrape(td)
    assert (value(after, "tmqgate_query_rows_scanned_total", topic=topic)
            - value(before, "tmqgate_query_rows_scanned_total", topic=topic)) == 4
    assert (value(after, "tmqgate_query_rows_delivered_total", topic=topic)
            - value(before, "tmqgate_query_rows_delivered_total", topic=topic)) == 2


def test_a_query_topic_read_in_small_fetches_scans_each_row_about_once(td: TdBroker) -> None:
    """Reading a 4-partition database topic with a small max.partition.fetch.bytes: each row
    is evaluated about once. A Fetch keeps only the first partition's batches past the
    partition's limit, so a view evaluating more than asked threw the rest away and evaluated
    it again at the next Fetch (4 rows scanned for each delivered before the steps were sized
    to the bytes asked for)."""
    db = unique("metrics_scan")
    td.sql(f"CREATE DATABASE {db} VGROUPS 4")
    td.sql(f"CREATE STABLE {db}.meters (ts TIMESTAMP, current DOUBLE, phase INT) TAGS (location BINARY(16))")
    tables, per_table = 8, 1000
    for t in range(tables):
        values = " ".join(f"({1_000_000 + i}, {i * 0.25}, {i % 7})" for i in range(per_table))
        td.sql(f"INSERT INTO {db}.d{t} USING {db}.meters TAGS ('site{t}') VALUES {values}")
    topic = f"{db}_all"
    td.sql(f"CREATE TOPIC {topic} AS DATABASE {db}")
    rows = tables * per_table
    before = scrape(td)
    consumer = KafkaConsumer(bootstrap_servers=td.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=16_384, consumer_timeout_ms=30_000)
    try:
        parts = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        got = 0
        for _ in consumer:
            got += 1
            if got == rows:
                break
    finally:
        consumer.close()
    assert got == rows
    after = scrape(td)
    scanned = value(after, "tmqgate_query_rows_scanned_total", topic=topic) - value(
        before, "tmqgate_query_rows_scanned_total", topic=topic)
    delivered = value(after, "tmqgate_query_rows_delivered_total", topic=topic) - value(
        before, "tmqgate_query_rows_delivered_total", topic=topic)
    assert delivered >= rows
    assert rows <= scanned <= 1.25 * rows, (scanned, rows)
