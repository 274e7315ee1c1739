"""A raw Kafka connection over a plain socket, speaking through our sans-IO codec.

Used where a stock client would hide what we want to see: malformed input, exact error
codes, whether the broker closed the connection, how long a Fetch was parked.
"""

from __future__ import annotations

import itertools
import select
import socket
import struct
import time
from typing import Any

from .helpers import split_hostport

# The versions the raw tests speak: name-based Produce/Fetch, all within Kafka 4's ranges.
PRODUCE_V = 9
FETCH_V = 12
LIST_OFFSETS_V = 7
METADATA_V = 12
API_VERSIONS_V = 3


class Closed(Exception):
    """The broker closed (or reset) the connection."""


class _Requests:
    """The few requests the tests need, over `request` (a RawConn's, or a RoutedConn's)."""

    def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float | None = None) -> dict:
        raise NotImplementedError

    def api_versions(self) -> dict[int, tuple[int, int]]:
        body = self.request(18, API_VERSIONS_V, {"client_software_name": "compat-raw",
                                                 "client_software_version": "1"})
        assert body["error_code"] == 0, body
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1) -> dict:
        """Produce one records blob; returns the partition response."""
        body = self.request(0, PRODUCE_V, {
            "transactional_id": None, "acks": acks, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
        })
        [t] = body["responses"]
        [p] = t["partition_responses"]
        return p

    def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
              timeout: float | None = None, isolation_level: int = 0) -> dict:
        """A sessionless Fetch of one partition (isolation level 0: read uncommitted, 1: read
        committed); returns the partition response."""
        body = self.request(1, FETCH_V, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout=timeout)
        assert body["error_code"] == 0, body
        [t] = body["responses"]
        [p] = t["partitions"]
        return p

    def list_offsets(self, topic: str, partition: int, timestamp: int, isolation_level: int = 0) -> dict:
        body = self.request(2, LIST_OFFSETS_V, {
            "replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                        "timestamp": timestamp}]}],
        })
        [t] = body["topics"]
        [p] = t["partitions"]
        return p


class RawConn(_Requests):
    """One TCP connection; `request` sends a frame and returns the decoded response body."""

    _corr = itertools.count(1)

    def __init__(self, bootstrap: str, timeout: float = 15.0, client_id: str = "compat-raw") -> None:
        host, port = split_hostport(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bytes

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete response within {self.timeout}s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from e
            if not chunk:
                raise Closed("EOF")
            buf += chunk
        return bytes(buf)

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next response frame without its size prefix; raises Closed / TimeoutError."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        (size,) = struct.unpack(">i", self._recv_exact(4, deadline))
        return self._recv_exact(size, deadline)

    def closed_within(self, timeout: float) -> bool:
        """True if the broker closes the connection within `timeout` s without answering."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return False
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not data:
                return True
            raise AssertionError(f"expected the connection to be closed, got bytes {data[:64].hex()}")

    # -- messages

    def send_request(self, api_key: int, version: int, body: dict[str, Any],
                     correlation_id: int | None = None) -> int:
        from tmqgate.protocol.messages import encode_request

        corr = next(self._corr) if correlation_id is None else correlation_id
        self.send_bytes(encode_request(api_key, version, corr, self.client_id, body))
        return corr

    def recv_response(self, api_key: int, version: int, corr: int, timeout: float | None = None) -> dict:
        from tmqgate.protocol.messages import decode_response

        got_corr, body = decode_response(api_key, version, self.recv_frame(timeout))
        assert got_corr == corr, f"correlation id {got_corr}, expected {corr}"
        return body

    def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float | None = None) -> dict:
        corr = self.send_request(api_key, version, body)
        return self.recv_response(api_key, version, corr, timeout)


# What a Kafka client looks up before sending: the transaction coordinator of a transactional
# id, the group coordinator of a group, the leader of a partition (api key -> how).
# InitProducerId, AddPartitionsToTxn (v4+: its first transaction's), AddOffsetsToTxn, EndTxn,
# DescribeTransactions
_TXN_KEYED = {22, 24, 25, 26, 65}
_GROUP_KEYED = {8, 9, 11, 12, 13, 14, 15, 28, 42, 47, 68, 69}  # OffsetCommit/Fetch, Join/Heartbeat/Leave/Sync,
# DescribeGroups, TxnOffsetCommit (to the group's), DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat/Describe


def _txn_key(body: dict[str, Any]) -> str | None:
    for field in ("transactional_id", "v3_and_below_transactional_id"):  # AddPartitionsToTxn v0-3
        if body.get(field):
            return str(body[field])
    ids = body.get("transactional_ids") or [t["transactional_id"] for t in body.get("transactions") or ()]
    return str(ids[0]) if ids else None


def _group_key(body: dict[str, Any]) -> str | None:
    if body.get("group_id") is not None:
        return str(body["group_id"])
    groups = body.get("groups") or body.get("groups_names") or body.get("group_ids") or []
    if not groups:
        return None
    first = groups[0]
    return str(first["group_id"] if isinstance(first, dict) else first)


def _partition_key(api_key: int, body: dict[str, Any]) -> tuple[str, int] | None:
    """Produce / Fetch / ListOffsets / DeleteRecords / OffsetForLeaderEpoch: the (topic,
    partition) of the first partition named."""
    try:
        if api_key == 0:
            t = body["topic_data"][0]
            return str(t["name"]), int(t["partition_data"][0]["index"])
        if api_key == 1:
            t = body["topics"][0]
            return str(t["topic"]), int(t["partitions"][0]["partition"])
        if api_key in (2, 21):  # ListOffsets, DeleteRecords
            t = body["topics"][0]
            return str(t["name"]), int(t["partitions"][0]["partition_index"])
        if api_key == 23:  # OffsetForLeaderEpoch
            t = body["topics"][0]
            return str(t["topic"]), int(t["partitions"][0]["partition"])
    except (KeyError, IndexError):
        return None
    return None


class RoutedConn(_Requests):
    """`RawConn.request` as a Kafka client routes it, for any number of brokers: requests keyed by
    a transactional id or a group go to its coordinator (FindCoordinator v4, asked each time: it
    moves), Produce / Fetch / ListOffsets to the partition's leader (Metadata), the rest to the
    bootstrap. A lookup that finds no answer yet uses the bootstrap, whose answer (NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER) the test's retry sees as a client would. One connection per broker."""

    def __init__(self, bootstrap: str, timeout: float = 15.0, client_id: str = "compat-raw") -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.client_id = client_id
        self._conns: dict[str, RawConn] = {}

    def conn(self, address: str) -> RawConn:
        if address not in self._conns:
            self._conns[address] = RawConn(address, self.timeout, self.client_id)
        return self._conns[address]

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> RoutedConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def found_coordinator(self, key: str, key_type: int) -> str | None:
        """HOST:PORT of the key's coordinator; None while there is none (FindCoordinator's error)."""
        body = self.conn(self.bootstrap).request(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        [found] = body["coordinators"]
        return f"{found['host']}:{found['port']}" if found["error_code"] == 0 else None

    def coordinator(self, key: str, key_type: int) -> str:
        """HOST:PORT of the key's coordinator (the bootstrap while there is none)."""
        return self.found_coordinator(key, key_type) or self.bootstrap

    def leader(self, topic: str, partition: int) -> str:
        """HOST:PORT of the partition's leader (the bootstrap while there is none)."""
        body = self.conn(self.bootstrap).request(3, METADATA_V, {
            "topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})
        brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in body["brokers"]}
        leaders = [p["leader_id"] for t in body["topics"] for p in t["partitions"] if p["partition_index"] == partition]
        return brokers.get(leaders[0], self.bootstrap) if leaders else self.bootstrap

    def route(self, api_key: int, body: dict[str, Any]) -> str:
        """The broker a client sends this request to."""
        key = _txn_key(body) if api_key in _TXN_KEYED else _group_key(body) if api_key in _GROUP_KEYED else None
        if key is not None:
            return self.coordinator(key, 1 if api_key in _TXN_KEYED else 0)
        tp = _partition_key(api_key, body)
        return self.leader(*tp) if tp is not None else self.bootstrap

    def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float | None = None) -> dict:
        return self.conn(self.route(api_key, body)).request(api_key, version, body, timeout)


def leader_address(bootstrap: str, topic: str, partition: int) -> str:
    """HOST:PORT of the partition's leader (the bootstrap while there is none): for a test that
    speaks to it over a RawConn of its own (parked Fetches, request order)."""
    with RoutedConn(bootstrap) as routed:
        return routed.leader(topic, partition)


def serving_leader(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30.0) -> str:
    """HOST:PORT of the partition's leader once it serves the partition (ListOffsets answered
    without error): of several brokers, a topic just made through one is known to the others a
    moment later (Kafka's metadata propagation; a client retries the error meanwhile)."""
    from .helpers import wait_until

    def served() -> str | None:
        address = leader_address(bootstrap, topic, partition)
        with RawConn(address) as c:
            return address if c.list_offsets(topic, partition, -1)["error_code"] == 0 else None

    return wait_until(served, timeout, 0.1, f"{topic}-{partition} served by its leader")


def coordinator_address(bootstrap: str, key: str, key_type: int = 0, timeout: float = 60.0) -> str:
    """HOST:PORT of the group's (key_type 0) or transactional id's (1) coordinator, once
    FindCoordinator names one (Kafka makes its internal topic on the first ask)."""
    from .helpers import wait_until

    with RoutedConn(bootstrap) as routed:
        return wait_until(lambda: routed.found_coordinator(key, key_type), timeout, 0.2, f"the coordinator of {key}")


def group_commit_records(bootstrap: str, partition: int, group: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of the group's offset-commit records in that partition of
    __consumer_offsets, from its start to its high watermark (Fetch sent to its leader)."""
    from tmqgate.protocol.internal_topics import parse_offset_commit_key
    from tmqgate.protocol.records import decode_records, iter_batches

    out: list[tuple[int, bytes, bytes | None]] = []
    offset = 0
    with RoutedConn(bootstrap) as conn:
        while True:
            answer = conn.fetch("__consumer_offsets", partition, offset)
            assert answer["error_code"] == 0, answer
            data = answer.get("records") or b""
            if not data:
                break
            for h in iter_batches(data):
                for r in decode_records(data[h.offset:h.offset + h.size]):
                    if r.offset >= offset and r.key is not None and r.key[:2] == b"\x00\x01" \
                            and parse_offset_commit_key(r.key)[0] == group:
                        out.append((r.offset, r.key, r.value))
                    offset = max(offset, r.offset + 1)
            if offset >= answer["high_watermark"]:
                break
    return out


def one_record_batch(value: bytes, key: bytes | None = None, size_pad: int = 0) -> bytes:
    """A single-record uncompressed v2 batch built by our codec."""
    from tmqgate.protocol.records import build_batch

    return build_batch([(key, value + b"." * size_pad, [], int(time.time() * 1000))])


def fetched_values(partition_response: dict) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a Fetch partition response."""
    from tmqgate.protocol.records import decode_records, iter_batches

    data = partition_response.get("records") or b""
    out = []
    for h in iter_batches(data):
        for r in decode_records(data[h.offset:h.offset + h.size]):
            out.append((r.offset, r.value))
    return out
