"""Vectorised encoding of query-topic rows: JSON values and Kafka record batches v2.

A Fetch on a query topic turns thousands of Arrow rows into Kafka records at once, so both
steps work on whole columns with Arrow compute kernels and never loop over rows in Python:

* :func:`json_objects` renders one JSON object per row (``{"ts":1700000000000,"v":10.3}``),
  byte-for-byte what ``json.dumps(row, ensure_ascii=False, separators=(",", ":"))`` prints
  for the same Python values (NaN and ±inf become ``null``; a FLOAT column prints the
  shortest text that reads back as the same float32, ``10.3`` rather than
  ``10.300000190734863``).
* :func:`records_batch` lays out a record batch v2 the way :func:`protocol.records.build_batch`
  does, but from columns: each record field is one Arrow binary "piece" per row (varints are
  split into one 1-byte piece per varint byte, absent where the varint is shorter), and one
  ``binary_join_element_wise`` call concatenates the pieces of every row at once.

Only pyarrow is used (the project does not depend on numpy).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from tmqgate.protocol.varint import encode_varint

__all__ = ["EncodingStopped", "arange", "json_objects", "records_batch"]

#: json_objects asks its `stop` once per this many columns.
STOP_EVERY_COLUMNS = 32


class EncodingStopped(Exception):
    """json_objects was told to stop (its caller no longer wants the answer)."""

# ---------------------------------------------------------------------------- shared helpers

_BIN = pa.binary()
_U0, _U7, _U80 = (pa.scalar(v, pa.uint64()) for v in (0, 7, 0x80))
_EMPTY = pa.scalar(b"", _BIN)

_arange_cache: pa.Buffer | None = None


def _unit_offsets(n: int) -> pa.Buffer:
    """int32 offsets 0, 1, …, n: a binary array of n one-byte values over any n-byte buffer.

    One buffer is kept and sliced, since every varint piece of every call needs one."""
    global _arange_cache
    need = (n + 1) * 4
    if _arange_cache is None or _arange_cache.size < need:
        size = max(n + 1, 1024, 2 * (_arange_cache.size // 4 if _arange_cache else 0))
        ones = pa.repeat(pa.scalar(1, pa.int32()), size)
        _arange_cache = pc.subtract(pc.cumulative_sum(ones), 1).cast(pa.int32()).buffers()[1]
    return _arange_cache.slice(0, need)


def arange(n: int) -> pa.Int32Array:
    """0, 1, …, n - 1 (int32) over the shared cached buffer of :func:`_unit_offsets`."""
    return pa.Array.from_buffers(pa.int32(), n, [None, _unit_offsets(n)])


def _as_array(a: pa.Array | pa.ChunkedArray | Sequence[object], what: str) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    if isinstance(a, pa.Array):
        return a
    try:
        return pa.array(a)
    except (pa.ArrowException, TypeError) as e:
        raise TypeError(f"{what}: expected an Arrow array, not {type(a).__name__}") from e


# ---------------------------------------------------------------------------- varints

_zigzag_bytes = encode_varint  # one zigzag varint, for the per-batch constants


def _varint_pieces(values: pa.Array) -> list[pa.Array]:
    """Zigzag varints of an int64 column as binary arrays of one byte per row each.

    Piece ``j`` holds byte ``j`` of every row's varint and is null (skipped when joining)
    where that varint is shorter; there are as many pieces as the longest varint needs."""
    n = len(values)
    v = pc.cast(values, pa.int64())
    # (v >> 63) as two shifts: Arrow 26 returns an int64 unchanged when shifted right by 63
    sign = pc.shift_right(pc.shift_right(v, 32), 31)
    u = pc.cast(pc.bit_wise_xor(pc.shift_left(v, 1), sign), pa.uint64(), safe=False)
    hi = pc.max(u).as_py() or 0
    lo = pc.min(u).as_py() or 0
    nbytes = max(1, (hi.bit_length() + 6) // 7)
    offsets = _unit_offsets(n)
    pieces: list[pa.Array] = []
    g = u
    validity: pa.Buffer | None = None
    for j in range(nbytes):
        if j + 1 < nbytes:
            rest = pc.shift_right(g, _U7)
            always = lo >> (7 * (j + 1)) != 0  # every row's varint goes on past this byte
            more = None if always else pc.not_equal(rest, _U0)
            if always:
                byte = pc.bit_wise_or(g, _U80)
            else:
                byte = pc.if_else(more, pc.bit_wise_or(g, _U80), g)
        else:
            rest = more = None
            byte = g
        data = pc.cast(byte, pa.uint8(), safe=False).buffers()[1]  # keeps the low 8 bits
        pieces.append(pa.Array.from_buffers(_BIN, n, [validity, offsets, data]))
        validity = None if more is None else more.buffers()[1]
        g = rest
    return pieces


def _merge_constants(parts: list[pa.Array | bytes]) -> list[pa.Array | pa.Scalar]:
    """Adjacent constant pieces become one scalar, so the join has fewer arguments."""
    out: list[pa.Array | pa.Scalar] = []
    pending = b""
    for p in parts:
        if isinstance(p, bytes):
            pending += p
            continue
        if pending:
            out.append(pa.scalar(pending, _BIN))
            pending = b""
        out.append(p)
    if pending:
        out.append(pa.scalar(pending, _BIN))
    return out


def _total_length(parts: list[pa.Array | bytes], n: int) -> pa.Array:
    """Per-row byte count of the concatenated parts (a null piece counts 0)."""
    const = sum(len(p) for p in parts if isinstance(p, bytes))
    total = pa.repeat(pa.scalar(const, pa.int32()), n)
    for p in parts:
        if isinstance(p, bytes):
            continue
        lengths = pc.binary_length(p)
        total = pc.add(total, pc.fill_null(lengths, 0) if lengths.null_count else lengths)
    return total


def _binary_column(a: pa.Array | pa.ChunkedArray, what: str) -> pa.Array:
    """A key/value/header column as plain ``binary`` (nulls kept)."""
    a = _as_array(a, what)
    t = a.type
    if pa.types.is_dictionary(t):
        a = a.dictionary_decode()
        t = a.type
    if t != _BIN:
        if not (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_null(t) or pa.types.is_string_view(t)
            or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t)
        ):
            raise TypeError(f"{what}: expected a string or binary array, not {t}")
        a = pc.cast(a, _BIN)
    return a


def _length_and_bytes(col: pa.Array) -> list[pa.Array | bytes]:
    """Varint length (-1 for null) then the bytes: a key, a value or a header value."""
    if col.null_count == len(col):
        return [_zigzag_bytes(-1)]
    lengths = pc.binary_length(col)
    if col.null_count:
        lengths = pc.fill_null(lengths, -1)
    return [*_varint_pieces(lengths), col]


# ---------------------------------------------------------------------------- record batch

_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes … recordCount: the part under the CRC
_HEADER_AFTER_LENGTH = _PREFIX.size + _TAIL.size - 12  # what batchLength counts of the header


def records_batch(
    *,
    base_offset: int,
    last_offset: int,
    offsets: pa.Array,
    timestamps: pa.Array,
    keys: pa.Array,
    values: pa.Array,
    headers: list[tuple[str, bytes | pa.Array]],
) -> bytes:
    """One uncompressed record batch v2 (magic 2, attributes 0, no producer).

    ``offsets`` are absolute and strictly increasing within ``[base_offset, last_offset]``;
    lastOffsetDelta is ``last_offset - base_offset`` whatever rows are present, so a batch
    of filtered WAL versions (or of none: zero records) still moves the consumer on to
    ``last_offset + 1``.  ``timestamps`` are int64 (or Arrow timestamps) and not null;
    baseTimestamp is the first row's, maxTimestamp the largest (both -1 for zero records).
    ``keys``/``values`` are string or binary arrays, nulls allowed.  A header whose value is
    ``bytes`` is the same in every record; an array-valued one varies per record (nulls are
    written as null header values).
    """
    offsets_a = _as_array(offsets, "offsets")
    n = len(offsets_a)
    last_delta = last_offset - base_offset
    if not 0 <= last_delta < 1 << 31:
        raise ValueError(f"last_offset - base_offset = {last_delta} must be in [0, 2**31)")
    if n == 0:
        return _assemble(base_offset, last_delta, -1, -1, 0, b"")

    ts = _as_array(timestamps, "timestamps")
    if pa.types.is_timestamp(ts.type):
        ts = ts.cast(pa.int64())
    if len(ts) != n:
        raise ValueError(f"{len(ts)} timestamps for {n} offsets")
    if ts.null_count or offsets_a.null_count:
        raise ValueError("offsets and timestamps must not be null")
    offsets_a = offsets_a.cast(pa.int64())
    ts = ts.cast(pa.int64())

    first, last = offsets_a[0].as_py(), offsets_a[n - 1].as_py()
    if first < base_offset or last > last_offset:
        raise ValueError(f"offsets [{first}, {last}] outside [{base_offset}, {last_offset}]")
    if n > 1 and not pc.all(pc.greater(offsets_a.slice(1), offsets_a.slice(0, n - 1))).as_py():
        raise ValueError("offsets must be strictly increasing")
    base_ts = ts[0].as_py()
    max_ts = pc.max(ts).as_py()
    try:
        ts_delta = pc.subtract_checked(ts, base_ts)
    except pa.ArrowInvalid as e:
        raise ValueError("timestamp deltas overflow int64") from e

    key_col = _binary_column(keys, "keys")
    value_col = _binary_column(values, "values")
    if len(key_col) != n or len(value_col) != n:
        raise ValueError(f"{len(key_col)} keys and {len(value_col)} values for {n} offsets")

    parts: list[pa.Array | bytes] = [b"\x00"]  # record attributes
    parts += _varint_pieces(ts_delta)
    parts += _varint_pieces(pc.subtract(offsets_a, base_offset))
    parts += _length_and_bytes(key_col)
    parts += _length_and_bytes(value_col)
    parts.append(_zigzag_bytes(len(headers)))
    for name, hv in headers:
        name_b = name.encode()
        parts += (_zigzag_bytes(len(name_b)), name_b)
        if isinstance(hv, bytes | bytearray | memoryview):
            hv = bytes(hv)
            parts += (_zigzag_bytes(len(hv)), hv)
        elif hv is None:
            parts.append(_zigzag_bytes(-1))
        else:
            col = _binary_column(hv, f"header {name!r}")
            if len(col) != n:
                raise ValueError(f"header {name!r} has {len(col)} values for {n} records")
            parts += _length_and_bytes(col)

    # The record length is the sum of the parts' lengths: computing it from them lets one
    # join write each record whole, length varint first.
    records = pc.binary_join_element_wise(
        *_varint_pieces(_total_length(parts, n)), *_merge_constants(parts), _EMPTY, null_handling="skip"
    )
    rec_offsets = records.buffers()[1]
    start, end = struct.unpack_from("<i", rec_offsets, 0)[0], struct.unpack_from("<i", rec_offsets, 4 * n)[0]
    payload = records.buffers()[2].slice(start, end - start)
    return _assemble(base_offset, last_delta, base_ts, max_ts, n, payload)


def _assemble(
    base_offset: int, last_delta: int, base_ts: int, max_ts: int, count: int, payload: bytes | pa.Buffer
) -> bytes:
    """Header + records, with batchLength and the CRC-32C (attributes … end)."""
    tail = _TAIL.pack(0, last_delta, base_ts, max_ts, -1, -1, -1, count)
    crc = crc32c(payload, crc32c(tail))
    head = _PREFIX.pack(base_offset, _HEADER_AFTER_LENGTH + len(payload), -1, 2, crc)
    return b"".join((head, tail, payload))


# ---------------------------------------------------------------------------- JSON

_STR = pa.string()
_NULL_TEXT = pa.scalar("null", _STR)
_QUOTE = pa.scalar('"', _STR)
_EMPTY_STR = pa.scalar("", _STR)
# json.dumps's escapes for the control characters RFC 8259 makes us escape
_CONTROL_ESCAPES = [
    (chr(c), {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(c, f"\\u{c:04x}"))
    for c in range(0x20)
]


def _escaped_strings(s: pa.Array) -> pa.Array:
    """RFC 8259 string contents (without the quotes); nulls stay null."""
    s = pc.replace_substring(s, "\\", "\\\\")
    s = pc.replace_substring(s, '"', '\\"')
    # Control characters are rare: find candidate rows with a cheap ASCII test first, then
    # rewrite only the rows that really hold one.
    odd = pc.invert(pc.fill_null(pc.ascii_is_printable(s), True))
    if not pc.any(odd).as_py():
        return s
    sub = pc.filter(s, odd)  # non-ASCII or control characters
    has_control = pc.match_substring_regex(sub, r"[\x00-\x1f]")
    if not pc.any(has_control).as_py():
        return s
    rows = pc.filter(sub, has_control)
    for ch, esc in _CONTROL_ESCAPES:
        rows = pc.replace_substring(rows, ch, esc)
    return pc.replace_with_mask(s, odd, pc.replace_with_mask(sub, has_control, rows))


def _fix_subset(text: pa.Array, mask: pa.Array, fix) -> pa.Array:  # type: ignore[no-untyped-def]
    """Apply ``fix`` only to the rows under ``mask`` (rare float forms), in place."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return text
    return pc.replace_with_mask(text, mask, fix(pc.filter(text, mask)))


def _positional(exp: int):  # type: ignore[no-untyped-def]
    """'1.2345e+10' → '12345000000.0' for exponent ``exp`` (repr writes 1e10..1e16 out)."""
    pattern = rf"^(-?)(\d)(?:\.(\d+))?e\+{exp}$"

    def fix(t: pa.Array) -> pa.Array:
        hit = pc.match_substring_regex(t, pattern)
        sign = pc.replace_substring_regex(t, pattern, r"\1")
        digits = pc.utf8_rpad(pc.replace_substring_regex(t, pattern, r"\2\3"), width=exp + 1, padding="0")
        whole = pc.utf8_slice_codeunits(digits, 0, exp + 1)
        frac = pc.utf8_slice_codeunits(digits, exp + 1, 64)
        frac = pc.if_else(pc.equal(frac, ""), "0", frac)
        out = pc.binary_join_element_wise(sign, whole, ".", frac, "")
        return pc.if_else(hit, out, t)

    return fix


def _small_exponent(t: pa.Array) -> pa.Array:
    """'0.000015' → '1.5e-05', '1e-7' → '1e-07': repr's exponent form below 1e-4."""
    t = pc.replace_substring_regex(t, r"^(-?)0\.0000(0?)([1-9])$", r"\1\3e-0\2")
    t = pc.replace_substring_regex(t, r"^(-?)0\.0000(0?)([1-9])(\d+)$", r"\1\3.\4e-0\2")
    # the captured "0?" is empty for 1e-5 and "0" for 1e-6: make it the exponent's last digit
    t = pc.replace_substring_regex(t, r"e-0$", "e-05")
    t = pc.replace_substring_regex(t, r"e-00$", "e-06")
    return pc.replace_substring_regex(t, r"e-(\d)$", r"e-0\1")


def _float_texts(x: pa.Array) -> pa.Array:
    """Shortest round-trip text of each float in Python's ``repr`` style; NaN/±inf → null.

    Arrow's cast already gives the shortest digits (float32 ones for float32), but places
    the decimal point by other rules than ``repr``: ``1`` for ``1.0``, ``1e+10`` for
    ``10000000000.0``, ``0.00001`` for ``1e-05``, ``1e-7`` for ``1e-07``.  The masks below
    pick out those rows from the values and rewrite only them."""
    if x.type == pa.float16():
        x = x.cast(pa.float32())
    text = pc.cast(x, _STR)
    x64 = x.cast(pa.float64()) if x.type != pa.float64() else x
    ax = pc.abs(x64)
    integral = pc.and_(pc.equal(x64, pc.trunc(x64)), pc.less(ax, 1e10))
    text = _fix_subset(text, integral, lambda t: pc.binary_join_element_wise(t, ".0", ""))
    big = pc.and_(pc.greater_equal(ax, 9e9), pc.less(ax, 2e16))
    if pc.any(pc.fill_null(big, False)).as_py():
        for exp in range(10, 16):
            text = _fix_subset(text, big, _positional(exp))
    small = pc.and_(pc.less(ax, 2e-4), pc.greater(ax, 0.0))
    text = _fix_subset(text, small, _small_exponent)
    finite = pc.fill_null(pc.is_finite(x64), False)
    if pc.all(finite).as_py():
        return text
    if text.offset or finite.offset:
        return pc.if_else(finite, text, pa.scalar(None, _STR))
    # NaN/±inf (and nulls) become null: the finite mask is the new validity bitmap
    return pa.Array.from_buffers(_STR, len(text), [finite.buffers()[1], *text.buffers()[1:]])


def _json_values(col: pa.Array) -> tuple[pa.Array, bool]:
    """JSON text of each value of one column, ``null`` for nulls (never a null entry).

    The flag says the texts are string contents still to be put between quotes: when a
    string column has no nulls the quotes go into the constant parts of the object."""
    t = col.type
    if pa.types.is_dictionary(t):
        texts = pc.take(_quoted(*_json_values(col.dictionary)), col.indices)
    elif pa.types.is_null(t):
        return pa.repeat(_NULL_TEXT, len(col)), False
    elif pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        texts = pc.cast(col, _STR)
    elif pa.types.is_floating(t):
        texts = _float_texts(col)
    elif pa.types.is_temporal(t):  # TIMESTAMP as stored: its integer in the column's unit
        texts = pc.cast(pc.cast(col, pa.int64()), _STR)
    elif (
        pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
        or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
    ):
        texts = _escaped_strings(col if t == _STR else pc.cast(col, _STR))
        if not texts.null_count:
            return texts, True
        texts = _quoted(texts, True)
    else:
        raise TypeError(f"no JSON form for Arrow type {t}")
    if texts.type != _STR:
        texts = texts.cast(_STR)
    return (pc.fill_null(texts, _NULL_TEXT) if texts.null_count else texts), False


def _quoted(texts: pa.Array, quote: bool) -> pa.Array:
    """Finish string contents as literals (null stays null)."""
    return pc.binary_join_element_wise(_QUOTE, texts, _QUOTE, _EMPTY_STR) if quote else texts


def json_objects(table: pa.Table, names: list[str] | None = None,
                 stop: Callable[[], bool] | None = None) -> pa.StringArray:
    """One JSON object text per row: ``{"<name>":<value>,…}`` in column order.

    ``names`` replaces the column names as keys (same count).  Integers (any width, signed
    or not) and booleans are JSON literals, floats print as ``repr`` would print the
    (float32-shortest for FLOAT) value with NaN/±inf as ``null``, strings are escaped per
    RFC 8259 (``"``, ``\\`` and U+0000–U+001F; other characters pass as UTF-8), temporal
    columns print their integer, and nulls print ``null``.

    ``stop`` is asked every STOP_EVERY_COLUMNS columns (the cost grows with the columns even
    for one row: a 4,096-column row takes seconds); when it says so, EncodingStopped is raised.
    """
    if names is None:
        names = table.column_names
    elif len(names) != table.num_columns:
        raise ValueError(f"{len(names)} names for {table.num_columns} columns")
    n = table.num_rows
    if table.num_columns == 0:
        return pa.repeat(pa.scalar("{}", _STR), n)
    parts: list[pa.Array | pa.Scalar] = []
    glue = "{"
    for i, (name, column) in enumerate(zip(names, table.columns, strict=True)):
        if stop is not None and i % STOP_EVERY_COLUMNS == 0 and stop():
            raise EncodingStopped
        texts, quote = _json_values(_as_array(column, name))
        glue += ("," if i else "") + json.dumps(str(name), ensure_ascii=False) + ":" + ('"' if quote else "")
        parts += (pa.scalar(glue, _STR), texts)
        glue = '"' if quote else ""
    parts.append(pa.scalar(glue + "}", _STR))
    out = pc.binary_join_element_wise(*parts, _EMPTY_STR)
    return out if isinstance(out, pa.Array) else pa.repeat(out, n)
