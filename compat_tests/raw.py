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


class RawConn:
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

    # -- the few requests the tests need

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
              timeout: float | None = None) -> dict:
        """A sessionless Fetch of one partition; returns the partition response."""
        body = self.request(1, FETCH_V, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout=timeout)
        assert body["error_code"] == 0, body
        [t] = body["responses"]
        [p] = t["partitions"]
        return p

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> dict:
        body = self.request(2, LIST_OFFSETS_V, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                        "timestamp": timestamp}]}],
        })
        [t] = body["topics"]
        [p] = t["partitions"]
        return p


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
