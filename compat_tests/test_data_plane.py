"""The Kafka data plane, end to end with each stock client and each compression codec.

Done-when item: records go in with keys, headers and explicit timestamps and come back
byte-exact with the offsets Kafka would assign; ListOffsets answers earliest / latest /
by-timestamp correctly; the admin API creates and deletes the topic.
"""

from __future__ import annotations

import time
import zlib

import pytest

from .conftest import Broker
from .helpers import (
    CLIENTS,
    CODECS,
    NULL_HEADER_VALUES,
    OutRecord,
    driver,
    expected_offsets,
    make_records,
    per_partition_counts,
    unique_topic,
)

N_RECORDS = 20_000
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PARTITIONS = 4


def _by_partition(records: list[OutRecord]) -> dict[int, list[OutRecord]]:
    out: dict[int, list[OutRecord]] = {p: [] for p in range(PARTITIONS)}
    for r in records:
        out[r.partition].append(r)
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_produce_consume_roundtrip(broker: Broker, client: str, codec: str) -> None:
    """20,000 records through one client and codec come back exactly as produced."""
    d = driver(client, broker.bootstrap)
    topic = unique_topic(f"dp-{client}-{codec}")
    records = make_records(N_RECORDS, PARTITIONS, seed=zlib.crc32(f"{client}/{codec}".encode()),
                           null_header_values=NULL_HEADER_VALUES[client])
    t0 = time.monotonic()

    d.create_topic(topic, PARTITIONS)
    assert topic in d.list_topics()

    # -- produce: delivery reports carry Kafka's offsets, 0..n-1 per partition in order
    reports = d.produce(topic, records, compression=codec, idempotent=True)
    want = [(r.partition, o) for r, o in zip(records, expected_offsets(records), strict=True)]
    assert reports == want

    # -- consume everything back from the beginning, manual assignment
    counts = per_partition_counts(records, PARTITIONS)
    got = d.consume(topic, counts, timeout=90)
    assert len(got) == N_RECORDS, f"consumed {len(got)} of {N_RECORDS}"
    by_part = _by_partition(records)
    for p in range(PARTITIONS):
        mine = [g for g in got if g.partition == p]
        assert [g.offset for g in mine] == list(range(len(by_part[p]))), f"partition {p} offsets"
        for g, r in zip(mine, by_part[p], strict=True):
            assert (g.key, g.value, g.headers, g.timestamp) == (r.key, r.value, r.headers, r.timestamp), (
                f"partition {p} offset {g.offset}")
            assert g.timestamp_type == 0, "CreateTime expected"

    # -- the stored batches keep the producer's codec (topic compression.type=producer)
    from tmqgate.protocol.records import iter_batches

    from .raw import RoutedConn

    with RoutedConn(broker.bootstrap) as raw:  # to partition 0's leader
        data = raw.fetch(topic, 0, 0)["records"] or b""
    headers = list(iter_batches(data))
    assert headers, "raw Fetch returned no batches"
    assert {h.compression for h in headers} == {CODEC_IDS[codec]}
    assert headers[0].base_offset == 0

    # -- ListOffsets
    parts = list(range(PARTITIONS))
    assert d.list_offsets(topic, dict.fromkeys(parts, "earliest")) == dict.fromkeys(parts, 0)
    assert d.list_offsets(topic, dict.fromkeys(parts, "latest")) == counts
    first_ts = min(r.timestamp for r in records)
    assert d.list_offsets(topic, dict.fromkeys(parts, first_ts - 10_000)) == dict.fromkeys(parts, 0)
    last_ts = max(r.timestamp for r in records)
    assert d.list_offsets(topic, dict.fromkeys(parts, last_ts + 1)) == dict.fromkeys(parts, None)
    # a timestamp exactly on a record, and one just after its predecessor (records are
    # 3 ms apart), both find that record; the last record of each partition too
    for frac in (0.0, 0.25, 0.5, 0.9, 1.0):
        ks = {p: min(int(len(by_part[p]) * frac), len(by_part[p]) - 1) for p in parts}
        exact = {p: by_part[p][k].timestamp for p, k in ks.items()}
        between = {p: (by_part[p][k - 1].timestamp + 1 if k else by_part[p][0].timestamp - 1)
                   for p, k in ks.items()}
        assert d.list_offsets(topic, exact) == ks, f"exact timestamps {exact}"
        assert d.list_offsets(topic, between) == ks, f"between timestamps {between}"

    # -- delete with the admin API; the topic disappears from the topic list
    d.delete_topic(topic)
    d.wait_topic_gone(topic)
    print(f"{client}/{codec}: {time.monotonic() - t0:.1f}s")
