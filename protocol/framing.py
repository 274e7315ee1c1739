"""Length-prefixed framing of the Kafka wire protocol (sans-IO).

Every request and response is an int32 size followed by that many bytes.  The size is checked
before buffering the body (like Kafka's ``socket.request.max.bytes``) so a bogus prefix cannot
make us hold gigabytes.
"""

from __future__ import annotations

import struct

__all__ = ["FrameReader", "FrameTooLarge"]

_unpack_size = struct.Struct(">i").unpack_from


class FrameTooLarge(Exception):
    """A size prefix is negative or larger than the allowed maximum; close the connection."""

    def __init__(self, size: int, max_size: int | None = None) -> None:
        super().__init__(f"frame size {size} is invalid (max {max_size})")
        self.size = size
        self.max_size = max_size


class FrameReader:
    """Split a byte stream into frames: ``feed(data)`` returns the frames it completed."""

    __slots__ = ("max_size", "_buf")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the complete frames (size prefix stripped), in order."""
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray | memoryview = buf
        else:
            src = data  # common case: parse straight from the received chunk
        frames: list[bytes] = []
        pos, n, max_size = 0, len(src), self.max_size
        while n - pos >= 4:
            (size,) = _unpack_size(src, pos)
            if size < 0 or size > max_size:
                raise FrameTooLarge(size, max_size)
            end = pos + 4 + size
            if end > n:
                break
            frames.append(bytes(src[pos + 4:end]))
            pos = end
        if src is buf:
            del buf[:pos]  # O(1) for a prefix of a bytearray
        elif pos < n:
            buf += data[pos:]
        return frames
