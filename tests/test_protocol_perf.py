"""Throughput sanity checks for the hot paths (records must be passed through, not walked).

Bounds are ~50x what an idle machine needs so a loaded CI box does not flake; run with ``-s``
to see the timings.
"""

from __future__ import annotations

import os
import time
import timeit

from tmqgate.protocol.messages import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)


def _best(fn, n: int) -> float:
    return min(timeit.Timer(fn, timer=time.process_time).repeat(number=n, repeat=3)) / n


def test_produce_and_fetch_timings() -> None:
    rec64, rec1m = os.urandom(64 * 1024), os.urandom(1 << 20)
    produce = {"acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": i, "records": rec64} for i in range(4)]}]}
    fetch = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": i, "high_watermark": 100, "records": rec1m} for i in range(4)]}]}
    frame = encode_request(0, 9, 1, "bench", produce)[4:]
    resp = encode_response(1, 12, 1, fetch)[4:]
    timings = {
        "produce v9 encode_request": _best(lambda: encode_request(0, 9, 1, "bench", produce), 200),
        "produce v9 decode_request": _best(lambda: decode_request(frame), 200),
        "fetch v12 encode_response_parts": _best(lambda: encode_response_parts(1, 12, 1, fetch), 200),
        "fetch v12 decode_response(records_view)": _best(
            lambda: decode_response(1, 12, resp, records_view=True), 200),
    }
    for name, t in timings.items():
        print(f"{name:42s} {t * 1e6:8.1f} us")
        assert t < 5e-3, name
