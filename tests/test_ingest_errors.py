"""Schemaless ingestion refuses an undecodable batch with IngestError (answered INVALID_RECORD by
Produce) instead of letting the codec's CorruptRecord / DecompressedTooLarge escape and close the
connection."""

from __future__ import annotations

import os
import struct

import pytest
import zstandard
from crc32c import crc32c

from tmqgate.broker.sql.ingest import IngestError, parse_records
from tmqgate.protocol.compression import DEFAULT_MAX_DECOMPRESSED, GZIP, ZSTD
from tmqgate.protocol.records import build_batch

TS = 1_700_000_000_000


def raw_batch(payload: bytes, codec: int) -> bytes:
    tail = struct.pack(">hiqqqhii", codec, 0, TS, TS, -1, -1, -1, 1) + payload
    return struct.pack(">qiib", 0, 9 + len(tail), -1, 2) + struct.pack(">I", crc32c(tail)) + tail


def test_garbage_gzip_is_an_ingest_error() -> None:
    with pytest.raises(IngestError, match="corrupt"):
        parse_records(raw_batch(os.urandom(300), GZIP))


def test_bomb_is_an_ingest_error() -> None:
    # A zstd frame stating a content size past the decoder's cap: refused from its header.
    bomb = zstandard.ZstdCompressor().compress(b"\x00" * (DEFAULT_MAX_DECOMPRESSED + 1))
    with pytest.raises(IngestError, match="too large"):
        parse_records(raw_batch(bomb, ZSTD))


def test_good_batch_still_parses() -> None:
    batch = build_batch([(None, b"m,t=a v=1i64 1700000000000", [("tmq.precision", b"ms")], TS)],
                        compression=GZIP)
    assert [r.stable for r in parse_records(batch)] == ["m"]
