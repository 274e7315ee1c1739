"""InfluxDB line protocol → schemaless rows, as TDengine's schemaless writer parses it.

This is the ingestion hot path (rows/s): lines without escapes or strings whose head
(measurement and tags) was seen before take the fast path in `parse_line_protocol`; any other
line goes through `_LineParser`, which also words the errors. Keep the fast path's lookups
local and its checks in step with the general path's.

* ``measurement[,tag=v...] field=v[,field=v...] [timestamp]``. The measurement is the
  supertable, tags become NCHAR tags, fields become columns (`ingest_rules` for the shared
  rules, `child_tables` for the table's name). Escapes: ``\\,`` and ``\\ `` in the
  measurement; ``\\,`` ``\\=`` ``\\ `` in tag keys, tag values and field keys; ``\\"`` in
  string field values; ``\\\\`` is one backslash everywhere; any other backslash stays as it
  is. Runs of spaces separate the sections; blank lines and lines starting with ``#`` are
  skipped.
* Field types: ``"..."`` VARCHAR, ``L"..."`` NCHAR; numbers without suffix or ``f64`` DOUBLE,
  ``f32`` FLOAT, ``i8 i16 i32 i64`` (``i`` = BIGINT), ``u8 u16 u32 u64`` (``u`` = BIGINT
  UNSIGNED), suffixes case-insensitive; ``t T true True TRUE f F false False FALSE`` BOOL.
* Timestamp precision is chosen by the caller (ns by default; us, ms, s, m, h) and converted
  to the database's milliseconds; an absent timestamp or ``0`` means now.
* TDengine's schema limits (``tsdb/limits.py``): a line of more than 128 tags, or of more
  than 4,096 fields and tags with the timestamp, is refused as the line is split (a split
  never goes further than the limit). Duplicate keys in a line and a name used both as a
  field and as a tag are errors, as in TDengine.

Deviations: integer suffixes need integer literals (TDengine would truncate ``1.5i32``);
``inf``/``nan``/hex numbers are refused; a quoted string cannot span lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tmqgate.broker.tsdb.child_tables import table_of
from tmqgate.broker.tsdb.ingest_rules import (
    BOOL_V,
    FLOAT_MAX,
    INT64_MAX,
    INT_SUFFIX,
    MAX_COLUMN_NAME,
    MAX_TABLE_NAME,
    SchemalessError,
    SchemalessRow,
    check_name,
    dots,
    nchar_of,
    new_row,
    varchar_of,
)
from tmqgate.broker.tsdb.limits import MAX_COLUMNS, MAX_FIELDS, MAX_TAGS, too_many_columns, too_many_tags
from tmqgate.broker.tsdb.types import DOUBLE, FLOAT, TDType
from tmqgate.protocol import clock

__all__ = ["PRECISION_UNITS", "head_parser", "parse_line_protocol"]


# --- field values ---------------------------------------------------------------------

_BOOLS: dict[str, bool] = {
    "t": True, "T": True, "true": True, "True": True, "TRUE": True,
    "f": False, "F": False, "false": False, "False": False, "FALSE": False,
}  # fmt: skip

# fast-path suffix table: written suffix -> (int type or None, min, max, suffix length);
# float suffixes map to None so the fast path hands them to _field_value
_FAST_SUFFIX: dict[str, tuple[TDType | None, int, int, int]] = {}
for _s, (_t, _lo, _hi) in INT_SUFFIX.items():
    if _s[-1].isdigit():
        for _c in (_s[0], _s[0].upper()):
            _FAST_SUFFIX[_c + _s[1:]] = (_t, _lo, _hi, len(_s))
for _s in ("f32", "f64", "F32", "F64"):
    _FAST_SUFFIX[_s] = (None, 0, 0, 3)

_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII).fullmatch
_SUFFIXED_NUMBER = re.compile(
    r"([+-]?\d+)([iIuU](?:8|16|32|64)?)|([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fF](32|64)", re.ASCII
).fullmatch
_FIELD_STRING_ESC = re.compile(r'\\(["\\])')


def _field_value(raw: str, line: int) -> tuple[TDType, Any]:
    """Type and value of a line-protocol field value (``raw`` as written, non-empty)."""
    last = raw[-1]
    if last == '"':
        if raw[0] == '"' and len(raw) >= 2:
            s = raw[1:-1]
            if "\\" in s:
                s = _FIELD_STRING_ESC.sub(r"\1", s)
            return varchar_of(s, line), s
        if raw[0] in "lL" and len(raw) >= 3 and raw[1] == '"':
            s = raw[2:-1]
            if "\\" in s:
                s = _FIELD_STRING_ESC.sub(r"\1", s)
            return nchar_of(s, line), s
        if raw[0] in "gGbB" and len(raw) >= 3 and raw[1] == '"':
            kind = "GEOMETRY" if raw[0] in "gG" else "VARBINARY"
            raise SchemalessError(f"{kind} field values ({raw[:20]}) are not supported", line)
        raise SchemalessError(f"invalid string field value {raw[:40]!r}", line)
    if last in "0123456789.":
        if _PLAIN_NUMBER(raw):
            v = float(raw)
            if v - v != 0.0:  # inf
                raise SchemalessError(f"number {raw[:40]} out of range for DOUBLE", line)
            return DOUBLE, v
    else:
        b = _BOOLS.get(raw)
        if b is not None:
            return BOOL_V[b]
    m = _SUFFIXED_NUMBER(raw)
    if m is not None:
        if m.group(1) is not None:
            t, lo, hi = INT_SUFFIX[m.group(2).lower()]
            iv = int(m.group(1))
            if not lo <= iv <= hi:
                raise SchemalessError(f"value {m.group(1)[:40]} out of range for {t.name} [{lo}, {hi}]", line)
            return t, iv
        v = float(m.group(3))
        if m.group(4) == "32":
            if not abs(v) <= FLOAT_MAX:
                raise SchemalessError(f"number {raw[:40]} out of range for FLOAT", line)
            return FLOAT, v
        if v - v != 0.0:
            raise SchemalessError(f"number {raw[:40]} out of range for DOUBLE", line)
        return DOUBLE, v
    raise SchemalessError(f"invalid field value {raw[:40]!r}", line)


# --- lines ----------------------------------------------------------------------------

_MEASUREMENT = re.compile(r"(?:\\.|[^,\\ ])+", re.S)
_KEY = re.compile(r"(?:\\.|[^,=\\ ])+", re.S)
_FIELD_KV = re.compile(r'((?:\\.|[^,=\\ ])+)=([A-Za-z]?"(?:\\.|[^"\\])*"|[^,"\\ ]+)', re.S)
_MEASUREMENT_ESC = re.compile(r"\\([, \\])")
_KEY_ESC = re.compile(r"\\([,= \\])")

_PRECISION: dict[str, tuple[int, int]] = {  # (multiply, divide) to reach milliseconds
    "ns": (1, 1_000_000), "n": (1, 1_000_000),
    "us": (1, 1_000), "u": (1, 1_000), "µs": (1, 1_000),
    "ms": (1, 1),
    "s": (1_000, 1),
    "m": (60_000, 1),
    "h": (3_600_000, 1),
}  # fmt: skip


#: (multiply, divide) taking each precision's timestamps to milliseconds
PRECISION_UNITS: Mapping[str, tuple[int, int]] = _PRECISION


def head_parser() -> Callable[[str, int], tuple[str, str, dict[str, tuple[TDType, Any]]]]:
    """The parser of a line's head (measurement and tag set, as written; its line number for
    errors) into (supertable, child table, tags), as ``parse_line_protocol`` parses it
    (line_columns.py parses each distinct head of a batch with it)."""
    return _LineParser("ns", None, None, None).head


def _unescape_key(s: str) -> str:
    return _KEY_ESC.sub(r"\1", s) if "\\" in s else s


class _LineParser:
    """State for one parse call: options and the cache of parsed measurement+tag heads."""

    __slots__ = ("mul", "div", "now", "child_table_tag", "delimiter", "heads")

    def __init__(
        self, precision: str, now_ms: int | None, child_table_tag: str | None, delimiter: str | None
    ):
        p = _PRECISION.get(precision) if isinstance(precision, str) else None
        if p is None:
            raise SchemalessError(f"unknown timestamp precision {precision!r}: use ns, us, ms, s, m or h", 0)
        self.mul, self.div = p
        self.now = now_ms
        self.child_table_tag = child_table_tag
        self.delimiter = delimiter
        self.heads: dict[str, tuple[str, str, dict[str, tuple[TDType, Any]]]] = {}

    def now_ms(self) -> int:
        if self.now is None:
            self.now = clock.now_ms()
        return self.now

    # head = measurement plus tag set, as written
    def head(self, raw: str, line: int) -> tuple[str, str, dict[str, tuple[TDType, Any]]]:
        got = self.heads.get(raw)
        if got is None:
            got = self._parse_head(raw, line)
            if len(self.heads) < 100_000:
                self.heads[raw] = got
        return got

    def _parse_head(self, raw: str, line: int) -> tuple[str, str, dict[str, tuple[TDType, Any]]]:
        pairs: list[tuple[str, str]] = []
        if "\\" not in raw:
            items = raw.split(",", MAX_TAGS + 1)  # split no further than the limit
            if len(items) > MAX_TAGS + 1:
                raise SchemalessError.limit(too_many_tags(raw.count(",")), line)
            measurement = items[0]
            for item in items[1:]:
                k, eq, v = item.partition("=")
                if not eq:
                    raise SchemalessError(f"tag {item[:40]!r} has no '='", line)
                if not k:
                    raise SchemalessError(f"tag with an empty key in {raw[:60]!r}", line)
                if not v:
                    raise SchemalessError(f"tag {k[:40]!r} has an empty value", line)
                if "=" in v:
                    raise SchemalessError(f"tag {k[:40]!r}: unescaped '=' in its value", line)
                pairs.append((k, v))
        else:
            m = _MEASUREMENT.match(raw)
            if m is None:
                raise SchemalessError("missing measurement", line)
            measurement = _MEASUREMENT_ESC.sub(r"\1", m.group())
            pos, n = m.end(), len(raw)
            while pos < n:
                if raw[pos] != ",":
                    raise SchemalessError(f"unexpected {raw[pos]!r} at column {pos + 1}", line)
                km = _KEY.match(raw, pos + 1)
                if km is None:
                    raise SchemalessError(f"empty tag key at column {pos + 2}", line)
                pos = km.end()
                if pos >= n or raw[pos] != "=":
                    raise SchemalessError(f"tag {km.group()[:40]!r} has no '=' (column {pos + 1})", line)
                vm = _KEY.match(raw, pos + 1)
                if vm is None:
                    raise SchemalessError(f"tag {km.group()[:40]!r} has an empty value", line)
                pos = vm.end()
                if pos < n and raw[pos] == "=":
                    raise SchemalessError(f"tag {km.group()[:40]!r}: unescaped '=' in its value", line)
                pairs.append((_unescape_key(km.group()), _unescape_key(vm.group())))
                if len(pairs) > MAX_TAGS:
                    raise SchemalessError.limit(too_many_tags(len(pairs)), line)
        if not measurement:
            raise SchemalessError("missing measurement", line)
        stable = dots(measurement)
        check_name(stable, "measurement", MAX_TABLE_NAME, line)
        tags: dict[str, tuple[TDType, Any]] = {}
        for k, v in pairs:
            check_name(k, "tag key", MAX_COLUMN_NAME, line)
            if k in tags:
                raise SchemalessError(f"duplicate tag {k[:40]!r}", line)
            tags[k] = (nchar_of(v, line), v)
        tbname, tags = table_of(stable, tags, self.child_table_tag, self.delimiter, line)
        return stable, tbname, tags

    def fields(self, rest: str, line: int) -> tuple[dict[str, tuple[TDType, Any]], str]:
        """Field set and the raw timestamp ('' if absent) from the text after the head."""
        if '"' not in rest and "\\" not in rest:
            parts = rest.split(" ")
            if len(parts) > 2 or not parts[0] or (len(parts) == 2 and not parts[1]):
                parts = [x for x in parts if x]
                if len(parts) > 2 or not parts:
                    raise SchemalessError(
                        "missing field set"
                        if not parts
                        else f"unexpected text after the timestamp: {parts[2][:40]!r}",
                        line,
                    )
            cols: dict[str, tuple[TDType, Any]] = {}
            items = parts[0].split(",", MAX_FIELDS)  # split no further than the limit
            if len(items) > MAX_FIELDS:
                raise SchemalessError.limit(too_many_columns(parts[0].count(",") + 2), line)
            for item in items:
                k, eq, v = item.partition("=")
                if not k or not eq or not v or "=" in v:
                    raise SchemalessError(_bad_field(item), line)
                if len(k) > 16:
                    check_name(k, "field key", MAX_COLUMN_NAME, line)
                cols[k] = _field_value(v, line)
            if len(cols) != len(items):
                raise SchemalessError(
                    f"duplicate field {_first_dup([i.partition('=')[0] for i in items])!r}", line
                )
            return cols, parts[1] if len(parts) == 2 else ""
        return self._fields_slow(rest, line)

    def _fields_slow(self, rest: str, line: int) -> tuple[dict[str, tuple[TDType, Any]], str]:
        cols: dict[str, tuple[TDType, Any]] = {}
        n = len(rest)
        pos = 0
        match = _FIELD_KV.match
        while True:
            m = match(rest, pos)
            if m is None:
                raise _field_error(rest, pos, line)
            key, raw = m.group(1, 2)
            if "\\" in key:
                key = _KEY_ESC.sub(r"\1", key)
            if len(key) > 16:
                check_name(key, "field key", MAX_COLUMN_NAME, line)
            if key in cols:
                raise SchemalessError(f"duplicate field {key[:40]!r}", line)
            cols[key] = _field_value(raw, line)
            if len(cols) > MAX_FIELDS:
                raise SchemalessError.limit(too_many_columns(len(cols) + 1), line)
            pos = m.end()
            if pos >= n:
                break
            c = rest[pos]
            if c == " ":
                break
            if c != ",":
                raise SchemalessError(f"field {key[:40]!r}: unexpected {c!r} after its value", line)
            pos += 1
        tail = rest[pos:].strip(" ")
        if " " in tail:
            raise SchemalessError(f"unexpected text after the timestamp: {tail[:40]!r}", line)
        return cols, tail

    def timestamp(self, raw: str, line: int) -> int:
        if not raw or raw == "0":
            return self.now_ms()
        if not (raw.isascii() and raw.isdigit()):
            if raw[0] == "-" and raw[1:].isascii() and raw[1:].isdigit():
                raise SchemalessError(f"negative timestamp {raw[:40]}", line)
            raise SchemalessError(f"invalid timestamp {raw[:40]!r}", line)
        ts = int(raw)
        if ts > INT64_MAX:
            raise SchemalessError(f"timestamp {raw[:40]} out of range", line)
        ts = ts * self.mul // self.div
        if ts > INT64_MAX:
            raise SchemalessError(f"timestamp {raw[:40]} out of range in milliseconds", line)
        return ts


def _field_error(rest: str, pos: int, line: int) -> SchemalessError:
    """Say what is wrong with the field at ``pos`` (only called once parsing failed)."""
    km = _KEY.match(rest, pos)
    if km is None:
        return SchemalessError(
            "missing field set" if pos == 0 else f"empty field key at column {pos + 1}", line
        )
    key = _unescape_key(km.group())
    p = km.end()
    if p >= len(rest) or rest[p] != "=":
        return SchemalessError(f"field {key[:40]!r} has no '='", line)
    if p + 1 >= len(rest) or rest[p + 1] in ", ":
        return SchemalessError(f"field {key[:40]!r} has an empty value", line)
    if rest[p + 1] == "=":
        return SchemalessError(f"field {key[:40]!r}: unescaped '=' in its value", line)
    return SchemalessError(f"field {key[:40]!r} has an invalid value (unterminated string?)", line)


def _first_dup(keys: Sequence[str]) -> str:
    seen: set[str] = set()
    for k in keys:
        if k in seen:
            return k
        seen.add(k)
    return ""


def _bad_field(item: str) -> str:
    k, eq, v = item.partition("=")
    if not item:
        return "empty field (stray ',')"
    if not eq:
        return f"field {item[:40]!r} has no '='"
    if not k:
        return f"field with an empty key ({item[:40]!r})"
    if not v:
        return f"field {k[:40]!r} has an empty value"
    return f"field {k[:40]!r}: unescaped '=' in its value"


_UNTIL_SPACE = re.compile(r"(?:\\.|[^\\ ])*", re.S)


def _split_head(line: str, lineno: int) -> tuple[str, str]:
    """Split a line at its first unescaped space: raw head (measurement, tags) and the rest."""
    if "\\" not in line:
        i = line.find(" ")
        if i < 0:
            raise SchemalessError("missing field set", lineno)
        return line[:i], line[i + 1 :]
    m = _UNTIL_SPACE.match(line)
    assert m is not None  # the pattern matches any text
    i = m.end()
    if i >= len(line):
        raise SchemalessError("missing field set", lineno)
    if line[i] != " ":
        raise SchemalessError("dangling backslash at the end of the line", lineno)
    return line[:i], line[i + 1 :]


# Per-line parser kept inlined, past C901's limit: a call per field costs measurable throughput.
def parse_line_protocol(  # noqa: C901
    text: str | bytes,
    precision: str = "ns",
    now_ms: int | None = None,
    *,
    child_table_tag: str | None = None,
    child_table_delimiter: str | None = None,
) -> list[SchemalessRow]:
    """Parse InfluxDB line protocol as TDengine's schemaless writer does (see module doc).

    ``precision`` is the unit of the timestamps in ``text``; rows carry milliseconds.
    ``now_ms`` stands in for the clock (rows without a timestamp). ``child_table_tag`` and
    ``child_table_delimiter`` are TDengine's smlChildTableName and
    smlAutoChildTableNameDelimiter. Raises SchemalessError naming the line and the fault.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemalessError(f"not UTF-8 at byte {e.start}", 0) from None
    if not isinstance(text, str):
        raise SchemalessError(f"expected text, got {type(text).__name__}", 0)
    p = _LineParser(precision, now_ms, child_table_tag, child_table_delimiter)
    rows: list[SchemalessRow] = []
    append = rows.append
    heads = p.heads
    mul, div = p.mul, p.div
    sfx_of = _FAST_SUFFIX.get
    lineno = 0
    for line in text.split("\n"):
        lineno += 1
        if not line:
            continue
        if line[0] in " \t\r#" or line[-1] in " \t\r":
            line = line.strip(" \t\r")
            if not line or line[0] == "#":
                continue
        try:
            # Fast path: no escapes, no strings, one space between sections, and values it
            # can type with certainty; anything else is left to the general path below,
            # which also words the errors.
            cols: dict[str, tuple[TDType, Any]] | None = None
            if "\\" not in line and '"' not in line:
                i = line.find(" ")
                if i > 0:
                    got = heads.get(line[:i])
                    parts = line[i + 1 :].split(" ")
                    n = len(parts)
                    # (past TDengine's column limit: the general path refuses the line)
                    items = parts[0].split(",", MAX_FIELDS) if got is not None else []
                    if (got is not None and (n == 2 or n == 1) and parts[0]
                            and len(items) < MAX_FIELDS and len(items) + len(got[2]) < MAX_COLUMNS):
                        cols = {}
                        for item in items:
                            k, _, v = item.partition("=")
                            if not k or not v or "=" in v or len(k) > 16:
                                cols = None
                                break
                            if v[-1] in "0123456789":
                                sfx = sfx_of(v[-3:]) or sfx_of(v[-2:])
                                if sfx is None:
                                    if v.isascii() and "_" not in v and v[0] in "+-.0123456789":
                                        try:
                                            f = float(v)
                                        except ValueError:
                                            cols = None
                                            break
                                        if f - f == 0.0:
                                            cols[k] = (DOUBLE, f)
                                            continue
                                elif sfx[0] is not None:
                                    num = v[: -sfx[3]]
                                    digits = num[1:] if num[:1] in ("+", "-") else num
                                    if digits.isdigit() and digits.isascii():
                                        iv = int(num)
                                        if sfx[1] <= iv <= sfx[2]:
                                            cols[k] = (sfx[0], iv)
                                            continue
                            else:
                                b = _BOOLS.get(v)
                                if b is not None:
                                    cols[k] = BOOL_V[b]
                                    continue
                            cols = None
                            break
                        if cols is not None:
                            stable, tbname, tags = got
                            raw_ts = parts[1] if n == 2 else ""
                            if (
                                len(cols) != len(items)
                                or (tags and not tags.keys().isdisjoint(cols))
                                or not (raw_ts.isdigit() and raw_ts.isascii())
                            ):
                                cols = None
                            else:
                                ts = int(raw_ts) * mul // div
                                if ts > INT64_MAX or raw_ts == "0":
                                    cols = None
                                else:
                                    append(new_row(SchemalessRow, (stable, tbname, tags, cols, ts, lineno)))
                                    continue
            raw_head, rest = _split_head(line, lineno)
            stable, tbname, tags = p.head(raw_head, lineno)
            if not rest.strip(" "):
                raise SchemalessError("missing field set", lineno)
            cols, raw_ts = p.fields(rest, lineno)
            if len(cols) + len(tags) >= MAX_COLUMNS:
                raise SchemalessError.limit(too_many_columns(len(cols) + len(tags) + 1), lineno)
            if tags and not tags.keys().isdisjoint(cols):
                dup = next(k for k in cols if k in tags)
                raise SchemalessError(f"{dup[:40]!r} is both a tag and a field", lineno)
            append(new_row(SchemalessRow, (stable, tbname, tags, cols, p.timestamp(raw_ts, lineno), lineno)))
        except (UnicodeError, OverflowError, RecursionError) as e:
            raise SchemalessError(f"invalid line ({type(e).__name__})", lineno) from None
    return rows
