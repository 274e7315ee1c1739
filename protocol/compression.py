"""Compression codecs of Kafka record batches (attributes bits 0-2).

Decoders accept every framing real clients send (gzip or zlib members, raw or xerial-framed
snappy, one or more LZ4 / zstd frames with or without content size) and stop at ``max_size``
output bytes, so a small hostile batch can't make the broker allocate gigabytes.
Every failure surfaces as :class:`CorruptRecord`; callers never see codec-specific errors.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED",
    "CorruptRecord",
    "DecompressedTooLarge",
    "compress",
    "decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Enough for any sane batch (Kafka's max.message.bytes defaults to 1 MiB compressed), far
# below what a decompression bomb would ask for.
DEFAULT_MAX_DECOMPRESSED = 128 * 1024 * 1024


class CorruptRecord(ValueError):
    """A record batch (or its compressed payload) is truncated, malformed or too large.

    Lives here rather than in ``protocol.records`` so the codecs can raise it without an
    import cycle; ``protocol.records.CorruptRecord`` is the same class.
    """


class DecompressedTooLarge(CorruptRecord):
    """The payload would decompress past the cap (a likely decompression bomb)."""


def _too_big(max_size: int) -> DecompressedTooLarge:
    return DecompressedTooLarge(f"decompressed batch exceeds {max_size} bytes")


# --------------------------------------------------------------------------- gzip

def _gzip_compress(data: bytes) -> bytes:
    # wbits=31: a gzip member, what the Java client's GZIPOutputStream writes.
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def _gzip_decompress(data: bytes, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    buf: bytes | memoryview = data
    while True:
        # wbits=47: auto-detect a gzip or zlib header.
        d = zlib.decompressobj(47)
        chunk = d.decompress(buf, max_size - total + 1)
        while True:
            total += len(chunk)
            if total > max_size:
                raise _too_big(max_size)
            out.append(chunk)
            if d.eof or not d.unconsumed_tail:
                break
            chunk = d.decompress(d.unconsumed_tail, max_size - total + 1)
        if not d.eof:
            raise CorruptRecord("truncated gzip stream")
        buf = d.unused_data
        # Concatenated members are legal gzip; trailing zero padding is tolerated as gzip(1) does.
        if not buf or not buf.strip(b"\x00"):
            break
    return b"".join(out)


# --------------------------------------------------------------------------- snappy

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size, as the Java client uses
_I32 = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    """xerial (snappy-java) framing: readable by the Java client and every other client."""
    parts = [_XERIAL_HEADER]
    mv = memoryview(data)
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    # The raw format states its uncompressed length up front: check it before allocating.
    n = cramjam.snappy.decompress_raw_len(block)
    if n > budget:
        raise _too_big(max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_xerial(data: bytes, max_size: int) -> bytes:
    mv = memoryview(data)
    pos, end = 16, len(mv)
    out: list[bytes] = []
    total = 0
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecord("truncated xerial snappy block header")
        (n,) = _I32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecord("truncated xerial snappy block")
        block = _snappy_raw(mv[pos : pos + n], max_size - total, max_size)
        total += len(block)
        out.append(block)
        pos += n
    return b"".join(out)


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    """Java producers send xerial framing, librdkafka raw snappy; tell them apart by the magic.

    Version/compat fields are not checked: some producers write them little-endian.  If a raw
    stream merely happens to start with the magic, the xerial parse fails and raw is tried.
    """
    if len(data) >= 16 and data[:8] == _XERIAL_MAGIC:
        try:
            return _snappy_xerial(data, max_size)
        except DecompressedTooLarge:
            raise
        except Exception as e:
            xerial_error = e
        try:
            return _snappy_raw(data, max_size, max_size)
        except Exception:
            raise CorruptRecord(f"bad xerial snappy stream: {xerial_error}") from xerial_error
    return _snappy_raw(data, max_size, max_size)


# --------------------------------------------------------------------------- lz4

def _lz4_compress(data: bytes) -> bytes:
    # Kafka's Java KafkaLZ4BlockInputStream refuses linked blocks; it writes no content size.
    out: bytes = lz4.frame.compress(data, block_linked=False, store_size=False)
    return out


def _lz4_decompress(data: bytes, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    buf: bytes = data
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = d.decompress(buf, max_size - total + 1)
        while True:
            total += len(chunk)
            if total > max_size:
                raise _too_big(max_size)
            out.append(chunk)
            if d.eof or d.needs_input:
                break
            chunk = d.decompress(b"", max_size - total + 1)
        if not d.eof:
            raise CorruptRecord("truncated lz4 frame")
        buf = d.unused_data
        if not buf:
            break
    return b"".join(out)


# --------------------------------------------------------------------------- zstd

def _zstd_compress(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def _zstd_decompress(data: bytes, max_size: int) -> bytes:
    dctx = zstandard.ZstdDecompressor()
    size = zstandard.frame_content_size(data)
    if size > max_size:
        raise _too_big(max_size)
    if size >= 0:
        # Fast path: one frame whose header states its size.  Several frames fall through.
        try:
            return dctx.decompress(data, allow_extra_data=False)
        except zstandard.ZstdError:
            pass
    # Streamed frames (librdkafka, zstd-jni streams) carry no content size, and a reader API
    # would silently stop at a truncation: feed a decompressobj small input steps instead, so
    # one step can't expand much past the remaining budget (zstd's worst ratio is ~2**15).
    out: list[bytes] = []
    total = 0
    mv = memoryview(data)
    pos, end = 0, len(mv)
    while pos < end:
        d = dctx.decompressobj()
        while not d.eof:
            if pos >= end:
                raise CorruptRecord("truncated zstd frame")
            step = max(64, (max_size - total) >> 17)
            chunk = d.decompress(mv[pos : pos + step])
            pos += step
            total += len(chunk)
            if total > max_size:
                raise _too_big(max_size)
            out.append(chunk)
        pos = min(pos, end) - len(d.unused_data)
    return b"".join(out)


# --------------------------------------------------------------------------- API

_COMPRESS = {GZIP: _gzip_compress, SNAPPY: _snappy_compress, LZ4: _lz4_compress, ZSTD: _zstd_compress}
_DECOMPRESS = {
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` for a batch with compression ``codec`` (0 returns it unchanged)."""
    if codec == NONE:
        return bytes(data)
    fn = _COMPRESS.get(codec)
    if fn is None:
        raise ValueError(f"unknown compression codec {codec}")
    return fn(data)


def decompress(codec: int, data: bytes | bytearray | memoryview,
               max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress a batch payload; raise :class:`CorruptRecord` if it is malformed or would
    exceed ``max_size`` bytes."""
    if codec == NONE:
        if len(data) > max_size:
            raise _too_big(max_size)
        return bytes(data)
    fn = _DECOMPRESS.get(codec)
    if fn is None:
        raise CorruptRecord(f"unknown compression codec {codec}")
    data = bytes(data)
    try:
        return fn(data, max_size)
    except CorruptRecord:
        raise
    except MemoryError as e:
        raise _too_big(max_size) from e
    except Exception as e:  # zlib.error, cramjam/lz4/zstd errors, ...: all mean corrupt input
        raise CorruptRecord(f"{CODEC_NAMES[codec]} decompression failed: {e}") from e
