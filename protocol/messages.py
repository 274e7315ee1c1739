"""Whole request/response frames: headers plus bodies (sans-IO).

Header versions follow Apache Kafka: requests use header v2 when the API version is flexible
(else v1); responses use header v1 when flexible (else v0) — except ApiVersions responses,
which always use v0 so that a client can read the error of a version it guessed wrong (KIP-511).
In request header v2 ``client_id`` stays a classic nullable string (int16 length) followed by a
tagged-fields section.  Trailing bytes after a request body are ignored, as Kafka does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from io import BytesIO

from .codec import (
    Chunk,
    DecodeError,
    Message,
    ViewIO,
    _r_nstr,
    _read_exact,
    _uv_bytes,
    _uv_read,
    _w_nstr,
    _w_tags,
    codec_for,
)
from .schemas import SCHEMAS

__all__ = [
    "API_VERSIONS_KEY",
    "InvalidRequest",
    "ProtocolError",
    "Request",
    "UnknownApi",
    "UnsupportedVersion",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "request_header_version",
    "response_header_version",
]

API_VERSIONS_KEY = 18
_UNSUPPORTED_VERSION = 35
_head = struct.Struct(">hhi")
_pack_i = struct.Struct(">i").pack
_unpack_h = struct.Struct(">h").unpack_from
_unpack_i = struct.Struct(">i").unpack_from


class ProtocolError(Exception):
    """A request frame we cannot serve; carries what could be read of its header."""

    def __init__(self, message: str, api_key: int | None = None, api_version: int | None = None,
                 correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnknownApi(ProtocolError):
    """The api key is not one we have a schema for (Kafka closes the connection)."""


class UnsupportedVersion(ProtocolError):
    """Known api key, version outside its schema's range (answer UNSUPPORTED_VERSION)."""


class InvalidRequest(ProtocolError):
    """Truncated or malformed header or body."""


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Message
    header_tags: dict[int, bytes] = field(default_factory=dict)


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if SCHEMAS[api_key].flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if SCHEMAS[api_key].flexible(api_version) else 0


def _read_tags(io: BytesIO) -> dict[int, bytes]:
    tags: dict[int, bytes] = {}
    for _ in range(_uv_read(io)):
        tag = _uv_read(io)
        tags[tag] = _read_exact(io, _uv_read(io))
    return tags


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Parse a request frame (size prefix already stripped).

    Raises only :class:`UnknownApi`, :class:`UnsupportedVersion` or :class:`InvalidRequest`.
    """
    if len(frame) < 8:
        raise InvalidRequest(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, corr = _head.unpack_from(frame)
    schema = SCHEMAS.get(api_key)
    if schema is None:
        raise UnknownApi(f"unknown api key {api_key}", api_key, api_version, corr)
    if not schema.min_version <= api_version <= schema.max_version:
        raise UnsupportedVersion(
            f"{schema.name} v{api_version} is not supported "
            f"(versions {schema.min_version}-{schema.max_version})", api_key, api_version, corr)
    io = BytesIO(frame)
    io.seek(8)
    flexible = schema.flexible(api_version)
    try:
        client_id = _r_nstr(io)
        header_tags = _read_tags(io) if flexible else {}
        body = codec_for(api_key, api_version, "request").decode_from(io)
    except Exception as exc:  # DecodeError, struct.error, UnicodeDecodeError, ...
        raise InvalidRequest(f"malformed {schema.name} v{api_version} request: {exc}",
                             api_key, api_version, corr) from exc
    return Request(api_key, api_version, corr, client_id, body, header_tags)


def _response_head(api_key: int, api_version: int, correlation_id: int) -> BytesIO:
    io = BytesIO()
    io.write(b"\0\0\0\0")
    io.write(_pack_i(correlation_id))
    if response_header_version(api_key, api_version) == 1:
        io.write(b"\x00")
    return io


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Message) -> bytes:
    """Full response frame: int32 size, response header v0/v1, body."""
    io = _response_head(api_key, api_version, correlation_id)
    codec_for(api_key, api_version, "response").encode_into(body, io)
    size = io.tell() - 4
    io.seek(0)
    io.write(_pack_i(size))
    return io.getvalue()


def encode_response_parts(api_key: int, api_version: int, correlation_id: int, body: Message,
                          threshold: int = 4096) -> list[Chunk]:
    """Like :func:`encode_response` but as a list of buffers for the caller to send in order:
    ``records`` payloads (or parts of a ``records`` list) of at least ``threshold`` bytes are
    passed through uncopied; the buffers joined are exactly :func:`encode_response`'s frame."""
    io = _response_head(api_key, api_version, correlation_id)
    parts = codec_for(api_key, api_version, "response").encode_parts(body, io, threshold)
    size = sum(map(len, parts)) - 4
    parts[0] = _pack_i(size) + parts[0][4:]
    return parts


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Message, header_tags: dict[int, bytes] | None = None) -> bytes:
    """Full request frame: int32 size, request header v1/v2, body (for tests and tools)."""
    schema = SCHEMAS[api_key]
    io = BytesIO()
    w = io.write
    w(b"\0\0\0\0")
    w(_head.pack(api_key, api_version, correlation_id))
    _w_nstr(w, client_id)
    if schema.flexible(api_version):
        if header_tags:
            _w_tags(w, list(header_tags.items()))
        else:
            w(_uv_bytes(0))
    codec_for(api_key, api_version, "request").encode_into(body, io)
    size = io.tell() - 4
    io.seek(0)
    w(_pack_i(size))
    return io.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview,
                    records_view: bool = False) -> tuple[int, Message]:
    """Parse a response frame (size prefix stripped) → ``(correlation_id, body)``.

    An ApiVersions response carrying UNSUPPORTED_VERSION is read as v0, as Kafka clients do,
    since brokers answer a too-new ApiVersions request in v0.  ``records_view`` makes
    ``records`` zero-copy memoryviews of ``frame``.  Raises ``DecodeError``.
    """
    io = ViewIO(frame) if records_view else BytesIO(frame)
    try:
        (corr,) = _unpack_i(_read_exact(io, 4))
        if response_header_version(api_key, api_version) == 1:
            _read_tags(io)
        if api_key == API_VERSIONS_KEY and api_version > 0:
            pos = io.tell()
            (err,) = _unpack_h(_read_exact(io, 2))
            io.seek(pos)
            if err == _UNSUPPORTED_VERSION:
                api_version = 0
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"malformed response header: {exc!r}") from exc
    return corr, codec_for(api_key, api_version, "response").decode_from(io)
