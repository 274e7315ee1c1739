"""TDengine schemaless ingestion: InfluxDB line protocol and OpenTSDB JSON → typed rows.

Rules followed (TDengine 3.x reference "Schemaless Writing", docs/en/14-reference/13-schemaless,
the developer guide pages on InfluxDB line protocol and OpenTSDB JSON, and the behaviour of
its client, source/client/src/clientSml*.c):

* Line protocol ``measurement[,tag=v...] field=v[,field=v...] [timestamp]``. The measurement
  is the supertable, tags become NCHAR tags, fields become columns, the timestamp column of a
  new supertable is ``_ts``. Escapes: ``\\,`` and ``\\ `` in the measurement; ``\\,`` ``\\=``
  ``\\ `` in tag keys, tag values and field keys; ``\\"`` in string field values; ``\\\\`` is
  one backslash everywhere; any other backslash stays as it is. Runs of spaces separate the
  sections; blank lines and lines starting with ``#`` are skipped.
* Field types: ``"..."`` VARCHAR, ``L"..."`` NCHAR; numbers without suffix or ``f64`` DOUBLE,
  ``f32`` FLOAT, ``i8 i16 i32 i64`` (``i`` = BIGINT), ``u8 u16 u32 u64`` (``u`` = BIGINT
  UNSIGNED), suffixes case-insensitive; ``t T true True TRUE f F false False FALSE`` BOOL.
* Timestamp precision is chosen by the caller (ns by default; us, ms, s, m, h) and converted
  to the database's milliseconds; an absent timestamp or ``0`` means now.
* OpenTSDB JSON: an object (or a list of them) with exactly the keys metric, timestamp, value,
  tags. The supertable gets ``_ts``, ``_value`` and the tags. Numbers are DOUBLE, strings
  NCHAR, true/false BOOL, and ``{"value": v, "type": t}`` picks a type (bool; i8/tinyint,
  i16/smallint, i32/int, i64/bigint, f32/float, f64/double; binary/varchar, nchar). A numeric
  timestamp of 10 digits is seconds, of 13 digits milliseconds, 0 is now; an object timestamp
  ``{"value": n, "type": "s"|"ms"|"us"|"ns"}`` states its unit.
* Dots in the supertable name (and in a chosen child table name) become underscores.
* Child table name: ``t_`` + md5 hex of the supertable name followed by ``,key=value`` for
  each tag, tags sorted by key case-insensitively (TDengine's buildChildTableName; string
  values hash as their UTF-8 bytes, typed JSON values as their little-endian binary form).
  With ``child_table_tag`` (TDengine's smlChildTableName) the value of that tag is the name
  and the tag itself is dropped; with ``child_table_delimiter``
  (smlAutoChildTableNameDelimiter) the tag values joined by it are the name when shorter than
  192 bytes. A supertable created with no tags at all gets TDengine's ``_tag_null NCHAR(1)``.
* String lengths (TDengine's smlFindNearestPowerOf2): a new VARCHAR/NCHAR column or tag, or
  a grown one, is sized to the smallest power of two above the longest value when that value
  is under 1024, otherwise exactly the value's length; capped at the type's maximum. VARCHAR
  lengths count UTF-8 bytes, NCHAR lengths characters (as ``types.py`` defines them).
* TDengine's schema limits (``tsdb/limits.py``): a line of more than 128 tags, or of more
  than 4,096 fields and tags with the timestamp, is refused as the line is split (a split
  never goes further than the limit), as is a batch whose lines add up past them; the byte
  lengths of a row and of the tags are checked on the supertable the write would make.
* A field whose type differs from the column's (inside a batch or against the supertable) is
  an error, as in TDengine; so are duplicate keys in a line and a name used both as a field
  and as a tag.

Deviations, all documented in the functions concerned: integer suffixes need integer
literals (TDengine would truncate ``1.5i32``); ``inf``/``nan``/hex numbers are refused; the
values of tags that already exist with another type (e.g. a tag created by SQL as INT) are
converted when they can be, instead of refusing the write; for JSON, errors name the index
(1-based) of the data point instead of a line; a quoted string cannot span lines.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import pyarrow as pa

from tmqgate.broker.tsdb.limits import (
    MAX_COLUMNS,
    MAX_FIELDS,
    MAX_TAGS,
    LimitProblem,
    too_many_columns,
    too_many_tags,
)
from tmqgate.broker.tsdb.names import Kind, name_problem
from tmqgate.broker.tsdb.rows import build_rows_table
from tmqgate.broker.tsdb.types import (
    BIGINT,
    BOOL,
    DOUBLE,
    FLOAT,
    INT,
    NCHAR_MAX,
    SMALLINT,
    TIMESTAMP,
    TINYINT,
    UBIGINT,
    UINT,
    USMALLINT,
    UTINYINT,
    VARCHAR_MAX,
    Column,
    StableSchema,
    TDType,
    TypeError_,
    check_value,
    type_from_name,
)
from tmqgate.protocol import clock

__all__ = [
    "JSON_VALUE_COLUMN",
    "TAG_NULL",
    "TS_COLUMN",
    "SchemaPlan",
    "SchemalessError",
    "SchemalessRow",
    "StableBatch",
    "child_table_name",
    "child_table_tags",
    "group_rows",
    "parse_line_protocol",
    "parse_opentsdb_json",
    "plan_schema",
    "schema_delta",
    "string_length",
]

TS_COLUMN = "_ts"
JSON_VALUE_COLUMN = "_value"
TAG_NULL = "_tag_null"
MAX_TABLE_NAME = 192  # bytes, TSDB_TABLE_NAME_LEN - 1
MAX_COLUMN_NAME = 64  # bytes, TSDB_COL_NAME_LEN - 1
_INT64_MAX = 2**63 - 1
_FLOAT_MAX = 3.4028234663852886e38


class SchemalessError(ValueError):
    """Input TDengine's schemaless writer would refuse; ``line_number`` is 1-based (0: none);
    ``code`` TDengine's error code where the refusal has a specific one (a schema limit)."""

    def __init__(self, message: str, line_number: int, code: int | None = None) -> None:
        super().__init__(f"line {line_number}: {message}" if line_number else message)
        self.message = message
        self.line_number = line_number
        self.code = code

    @classmethod
    def limit(cls, problem: LimitProblem, line_number: int) -> SchemalessError:
        """A schema limit (`tsdb.limits`) gone past, with TDengine's code."""
        return cls(problem.message, line_number, problem.code)


class SchemalessRow(NamedTuple):
    """One parsed row: tag and field values with the type each would create, ts in ms.

    Rows from the same measurement+tag set share one ``tags`` dict: treat it as read-only.
    """

    stable: str
    tbname: str
    tags: dict[str, tuple[TDType, Any]]
    columns: dict[str, tuple[TDType, Any]]
    ts: int
    line: int = 0


_new_row = tuple.__new__  # SchemalessRow without the Python-level __new__ (hot loops)


# --- types ----------------------------------------------------------------------------


def string_length(n: int) -> int:
    """TDengine's declared length for a new string column holding values up to ``n`` long."""
    return n if n >= 1024 else 1 << n.bit_length()


@lru_cache(maxsize=4096)
def _string_type(kind: str, n: int) -> TDType:
    """VARCHAR/NCHAR sized by ``string_length`` for a value of length ``n`` (cached)."""
    return type_from_name(kind, min(string_length(n), VARCHAR_MAX if kind == "VARCHAR" else NCHAR_MAX))


def _len_in(kind: str, s: str) -> int:
    """A string's length in the unit of ``kind``: bytes for VARCHAR, characters for NCHAR."""
    if kind == "NCHAR" or s.isascii():
        return len(s)
    return len(s.encode("utf-8", "surrogatepass"))


_VARCHAR_BY_LEN: dict[int, TDType] = {}
_NCHAR_BY_LEN: dict[int, TDType] = {}


def _varchar_of(s: str, line: int) -> TDType:
    n = len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))
    t = _VARCHAR_BY_LEN.get(n)
    if t is None:
        if n > VARCHAR_MAX:
            raise SchemalessError(f"string of {n} bytes is longer than VARCHAR allows ({VARCHAR_MAX})", line)
        t = _VARCHAR_BY_LEN[n] = _string_type("VARCHAR", n)
    return t


def _nchar_of(s: str, line: int) -> TDType:
    n = len(s)
    t = _NCHAR_BY_LEN.get(n)
    if t is None:
        if n > NCHAR_MAX:
            raise SchemalessError(f"string of {n} characters is longer than NCHAR allows ({NCHAR_MAX})", line)
        t = _NCHAR_BY_LEN[n] = _string_type("NCHAR", n)
    return t


# integer suffix → (type, min, max); float suffix → type
_INT_SUFFIX: dict[str, tuple[TDType, int, int]] = {
    "i8": (TINYINT, -(2**7), 2**7 - 1),
    "i16": (SMALLINT, -(2**15), 2**15 - 1),
    "i32": (INT, -(2**31), 2**31 - 1),
    "i64": (BIGINT, -(2**63), 2**63 - 1),
    "i": (BIGINT, -(2**63), 2**63 - 1),
    "u8": (UTINYINT, 0, 2**8 - 1),
    "u16": (USMALLINT, 0, 2**16 - 1),
    "u32": (UINT, 0, 2**32 - 1),
    "u64": (UBIGINT, 0, 2**64 - 1),
    "u": (UBIGINT, 0, 2**64 - 1),
}
_BOOLS: dict[str, bool] = {
    "t": True, "T": True, "true": True, "True": True, "TRUE": True,
    "f": False, "F": False, "false": False, "False": False, "FALSE": False,
}  # fmt: skip
_BOOL_V = {True: (BOOL, True), False: (BOOL, False)}

# fast-path suffix table: written suffix -> (int type or None, min, max, suffix length);
# float suffixes map to None so the fast path hands them to _field_value
_FAST_SUFFIX: dict[str, tuple[TDType | None, int, int, int]] = {}
for _s, (_t, _lo, _hi) in _INT_SUFFIX.items():
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
            return _varchar_of(s, line), s
        if raw[0] in "lL" and len(raw) >= 3 and raw[1] == '"':
            s = raw[2:-1]
            if "\\" in s:
                s = _FIELD_STRING_ESC.sub(r"\1", s)
            return _nchar_of(s, line), s
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
            return _BOOL_V[b]
    m = _SUFFIXED_NUMBER(raw)
    if m is not None:
        if m.group(1) is not None:
            t, lo, hi = _INT_SUFFIX[m.group(2).lower()]
            iv = int(m.group(1))
            if not lo <= iv <= hi:
                raise SchemalessError(f"value {m.group(1)[:40]} out of range for {t.name} [{lo}, {hi}]", line)
            return t, iv
        v = float(m.group(3))
        if m.group(4) == "32":
            if not abs(v) <= _FLOAT_MAX:
                raise SchemalessError(f"number {raw[:40]} out of range for FLOAT", line)
            return FLOAT, v
        if v - v != 0.0:
            raise SchemalessError(f"number {raw[:40]} out of range for DOUBLE", line)
        return DOUBLE, v
    raise SchemalessError(f"invalid field value {raw[:40]!r}", line)


# --- names ----------------------------------------------------------------------------


def _dots(name: str) -> str:
    return name.replace(".", "_") if "." in name else name


def _check_name(name: str, what: str, limit: int, line: int) -> None:
    """Early refusal while parsing (`limit` is `tsdb.names`' for the kind of `what`)."""
    _check_new(name, _KIND_OF.get(what, "column"), what, line)


# What each name a schemaless line makes is, for `tsdb.names`' rule (checked in full where the
# name is made: `plan_schema` for supertables, columns, tags and child tables).
_KIND_OF: dict[str, Kind] = {"measurement": "table", "metric": "table", "tag key": "tag", "field key": "column"}


def _check_new(name: str, kind: Kind, what: str, line: int) -> None:
    """`tsdb.names`' rule for a name schemaless writing creates (TDengine quotes these names,
    so the escaped-name rules apply; '.' was already turned into '_')."""
    problem = name_problem(name, kind, quoted=True)
    if problem is not None:
        raise SchemalessError(f"{what}: {problem}", line)


_PACK: dict[str, str] = {
    "BOOL": "<B", "TINYINT": "<b", "SMALLINT": "<h", "INT": "<i", "BIGINT": "<q",
    "TINYINT UNSIGNED": "<B", "SMALLINT UNSIGNED": "<H", "INT UNSIGNED": "<I",
    "BIGINT UNSIGNED": "<Q", "FLOAT": "<f", "DOUBLE": "<d", "TIMESTAMP": "<q",
}  # fmt: skip


def _tag_bytes(t: TDType, v: Any) -> bytes:
    """A tag value as TDengine feeds it to md5: string bytes, or the value's binary form."""
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")
    return struct.pack(_PACK[t.name], v)


def _name_key(k: str) -> bytes:
    return k.encode("utf-8", "surrogatepass").lower()


def child_table_name(stable: str, tags: dict[str, tuple[TDType, Any]]) -> str:
    """TDengine's generated child table name: ``t_`` + md5 of stable and sorted ``,k=v`` tags."""
    h = hashlib.md5(stable.encode("utf-8", "surrogatepass"), usedforsecurity=False)
    for k in sorted(tags, key=_name_key):
        t, v = tags[k]
        h.update(b"," + k.encode("utf-8", "surrogatepass") + b"=" + _tag_bytes(t, v))
    return "t_" + h.hexdigest()


def _truncate_name(name: str) -> str:
    b = name.encode("utf-8", "surrogatepass")
    if len(b) <= MAX_TABLE_NAME:
        return name
    return b[:MAX_TABLE_NAME].decode("utf-8", "ignore")


def _table_of(
    stable: str,
    tags: dict[str, tuple[TDType, Any]],
    child_table_tag: str | None,
    delimiter: str | None,
    line: int,
) -> tuple[str, dict[str, tuple[TDType, Any]]]:
    """The child table name for a row and the tags it keeps (the name tag is dropped)."""
    if delimiter and tags:
        parts = [v if isinstance(v, str) else str(v) for _, v in tags.values()]
        name = delimiter.join(parts)
        if len(name.encode("utf-8", "surrogatepass")) < MAX_TABLE_NAME:
            return _dots(name), tags
    if child_table_tag is not None and child_table_tag in tags:
        tags = dict(tags)
        _, v = tags.pop(child_table_tag)
        name = _truncate_name(_dots(v if isinstance(v, str) else str(v)))
        if name:
            return name, tags
        raise SchemalessError(f"tag {child_table_tag!r} names the child table but is empty", line)
    return child_table_name(stable, tags), tags


# --- line protocol --------------------------------------------------------------------

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
        stable = _dots(measurement)
        _check_name(stable, "measurement", MAX_TABLE_NAME, line)
        tags: dict[str, tuple[TDType, Any]] = {}
        for k, v in pairs:
            _check_name(k, "tag key", MAX_COLUMN_NAME, line)
            if k in tags:
                raise SchemalessError(f"duplicate tag {k[:40]!r}", line)
            tags[k] = (_nchar_of(v, line), v)
        tbname, tags = _table_of(stable, tags, self.child_table_tag, self.delimiter, line)
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
                    _check_name(k, "field key", MAX_COLUMN_NAME, line)
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
                _check_name(key, "field key", MAX_COLUMN_NAME, line)
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
        if ts > _INT64_MAX:
            raise SchemalessError(f"timestamp {raw[:40]} out of range", line)
        ts = ts * self.mul // self.div
        if ts > _INT64_MAX:
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


def parse_line_protocol(
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
                                    cols[k] = _BOOL_V[b]
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
                                if ts > _INT64_MAX or raw_ts == "0":
                                    cols = None
                                else:
                                    append(_new_row(SchemalessRow, (stable, tbname, tags, cols, ts, lineno)))
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
            append(_new_row(SchemalessRow, (stable, tbname, tags, cols, p.timestamp(raw_ts, lineno), lineno)))
        except (UnicodeError, OverflowError, RecursionError) as e:
            raise SchemalessError(f"invalid line ({type(e).__name__})", lineno) from None
    return rows


# --- OpenTSDB JSON --------------------------------------------------------------------

_JSON_INT_TYPES: dict[str, tuple[TDType, int, int]] = {
    "i8": _INT_SUFFIX["i8"], "tinyint": _INT_SUFFIX["i8"],
    "i16": _INT_SUFFIX["i16"], "smallint": _INT_SUFFIX["i16"],
    "i32": _INT_SUFFIX["i32"], "int": _INT_SUFFIX["i32"],
    "i64": _INT_SUFFIX["i64"], "bigint": _INT_SUFFIX["i64"],
}  # fmt: skip
_JSON_FLOAT_TYPES: dict[str, TDType] = {"f32": FLOAT, "float": FLOAT, "f64": DOUBLE, "double": DOUBLE}
_JSON_TS_UNITS: dict[str, tuple[int, int]] = {
    "s": (1000, 1),
    "ms": (1, 1),
    "us": (1, 1000),
    "ns": (1, 1_000_000),
}


def _json_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _json_value(v: Any, what: str, line: int) -> tuple[TDType, Any]:
    """Type and value of a JSON value or tag, as TDengine's OpenTSDB JSON writer types it."""
    if isinstance(v, bool):
        return _BOOL_V[v]
    if _json_number(v):
        fv = float(v)
        if not math.isfinite(fv):
            raise SchemalessError(f"{what}: number out of range for DOUBLE", line)
        return DOUBLE, fv
    if isinstance(v, str):
        return _nchar_of(v, line), v
    if isinstance(v, dict):
        if len(v) != 2 or "value" not in v or not isinstance(v.get("type"), str):
            raise SchemalessError(f'{what}: a typed value is {{"value": ..., "type": "..."}}', line)
        val, typ = v["value"], v["type"].lower()
        if isinstance(val, bool):
            if typ != "bool":
                raise SchemalessError(f"{what}: type {v['type']!r} does not fit a boolean", line)
            return _BOOL_V[val]
        if _json_number(val):
            fv = float(val)
            if not math.isfinite(fv):
                raise SchemalessError(f"{what}: number out of range", line)
            it = _JSON_INT_TYPES.get(typ)
            if it is not None:
                t, lo, hi = it
                iv = int(val)  # TDengine truncates a fractional value
                if t is BIGINT:
                    iv = max(lo, min(hi, iv))  # and clamps BIGINT
                elif not lo <= iv <= hi:
                    raise SchemalessError(f"{what}: {val} out of range for {t.name}", line)
                return t, iv
            ft = _JSON_FLOAT_TYPES.get(typ)
            if ft is None:
                raise SchemalessError(f"{what}: type {v['type']!r} does not fit a number", line)
            if ft is FLOAT and abs(fv) > _FLOAT_MAX:
                raise SchemalessError(f"{what}: {val} out of range for FLOAT", line)
            return ft, fv
        if isinstance(val, str):
            if typ in ("binary", "varchar"):
                return _varchar_of(val, line), val
            if typ == "nchar":
                return _nchar_of(val, line), val
            raise SchemalessError(f"{what}: type {v['type']!r} does not fit a string", line)
        raise SchemalessError(f"{what}: unsupported value {json.dumps(val)[:40]}", line)
    raise SchemalessError(f"{what}: unsupported value {json.dumps(v)[:40]}", line)


def _json_timestamp(v: Any, now: Callable[[], int], line: int) -> int:
    """OpenTSDB timestamp → ms: 10 digits seconds, 13 digits ms, 0 now, or a typed object."""
    if isinstance(v, dict):
        if len(v) != 2 or not _json_number(v.get("value")) or not isinstance(v.get("type"), str):
            raise SchemalessError('timestamp object is {"value": <number>, "type": "s|ms|us|ns"}', line)
        unit = _JSON_TS_UNITS.get(v["type"].lower())
        if unit is None:
            raise SchemalessError(f"timestamp type {v['type']!r}: use s, ms, us or ns", line)
        val = v["value"]
        if not math.isfinite(val) or abs(val) >= 2.0**63:
            raise SchemalessError("timestamp out of range", line)
        iv = int(val)
        if iv == 0:
            return now()
        if iv < 0:
            raise SchemalessError("negative timestamp", line)
        ms = iv * unit[0] // unit[1]
        if ms > _INT64_MAX:
            raise SchemalessError("timestamp out of range", line)
        return ms
    if not _json_number(v):
        raise SchemalessError("timestamp must be a number or a typed object", line)
    if not math.isfinite(v) or abs(v) >= 2.0**63:
        raise SchemalessError("timestamp out of range", line)
    iv = int(v)
    if iv == 0:
        return now()
    if iv < 0:
        raise SchemalessError("negative timestamp", line)
    digits = len(str(iv))
    if digits == 10:
        return iv * 1000
    if digits == 13:
        return iv
    raise SchemalessError(
        f"timestamp {iv} has {digits} digits: seconds (10 digits) or milliseconds (13 digits) only", line
    )


def parse_opentsdb_json(
    text: str | bytes,
    now_ms: int | None = None,
    *,
    child_table_tag: str | None = None,
    child_table_delimiter: str | None = None,
) -> list[SchemalessRow]:
    """Parse OpenTSDB JSON (one data point object or a list of them) as TDengine does.

    Each row has the column ``_value`` and the point's tags. Error line numbers are the
    1-based index of the data point.
    """
    try:
        doc = json.loads(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise SchemalessError(f"invalid JSON: {str(e)[:80]}", 0) from None
    points = doc if isinstance(doc, list) else [doc]
    fixed: list[int] = [] if now_ms is None else [now_ms]

    def now() -> int:  # read once, by the first point without a timestamp
        if not fixed:
            fixed.append(clock.now_ms())
        return fixed[0]

    heads: dict[Any, tuple[str, str, dict[str, tuple[TDType, Any]]]] = {}
    rows: list[SchemalessRow] = []
    for i, point in enumerate(points, 1):
        try:
            if not isinstance(point, dict):
                raise SchemalessError("a data point must be a JSON object", i)
            if (
                len(point) == 4
                and "metric" in point
                and "tags" in point
                and "value" in point
                and "timestamp" in point
            ):
                byname = point
            else:
                byname = {k.lower(): v for k, v in point.items()}
                if len(point) != 4 or byname.keys() != {"metric", "timestamp", "value", "tags"}:
                    raise SchemalessError(
                        "a data point has exactly the keys metric, timestamp, value, tags", i
                    )
            metric, tags_in = byname["metric"], byname["tags"]
            if not isinstance(metric, str):
                raise SchemalessError("metric must be a string", i)
            if not isinstance(tags_in, dict) or not tags_in:
                raise SchemalessError("tags must be a non-empty object", i)
            if len(tags_in) > MAX_TAGS:  # before any work per tag
                raise SchemalessError.limit(too_many_tags(len(tags_in)), i)
            raw_ts = byname["timestamp"]
            if raw_ts.__class__ is int and 1_000_000_000_000 <= raw_ts < 10_000_000_000_000:
                ts = raw_ts  # 13 digits: milliseconds already
            else:
                ts = _json_timestamp(raw_ts, now, i)
            raw_value = byname["value"]
            if raw_value.__class__ is float and raw_value - raw_value == 0.0:
                value = (DOUBLE, raw_value)
            else:
                value = _json_value(raw_value, "value", i)
            key: tuple[Any, ...] | None
            try:
                key = (metric, tuple(tags_in.items()), tuple(map(type, tags_in.values())))
                got = heads.get(key)
            except TypeError:  # typed tag objects are unhashable: no caching for those
                key = got = None
            if got is None:
                stable = _dots(metric)
                _check_name(stable, "metric", MAX_TABLE_NAME, i)
                tags: dict[str, tuple[TDType, Any]] = {}
                for k, tv in tags_in.items():
                    _check_name(k, "tag key", MAX_COLUMN_NAME, i)
                    tags[k] = _json_value(tv, f"tag {k[:40]!r}", i)
                if JSON_VALUE_COLUMN in tags:
                    raise SchemalessError(f"tag {JSON_VALUE_COLUMN!r} clashes with the value column", i)
                got = (stable, *_table_of(stable, tags, child_table_tag, child_table_delimiter, i))
                if key is not None:
                    heads[key] = got
            stable, tbname, tags = got
            rows.append(_new_row(SchemalessRow, (stable, tbname, tags, {JSON_VALUE_COLUMN: value}, ts, i)))
        except (UnicodeError, OverflowError, RecursionError, ValueError) as e:
            if isinstance(e, SchemalessError):
                raise
            raise SchemalessError(f"invalid data point ({type(e).__name__})", i) from None
    return rows


# --- batches and schema changes -------------------------------------------------------


def _kind(t: TDType) -> str:
    return "VARCHAR" if t.name == "BINARY" else t.name


@dataclass(slots=True)
class StableBatch:
    """Rows of one supertable, column-wise, ready for ``plan_schema`` and ``to_table``.

    ``columns`` holds one list per field (None where a row lacks it) and ``column_types`` the
    type each field would create (strings sized for the batch's longest value). ``tables``
    holds each child table's tags, from its first row as TDengine does. The ``*_lines`` maps
    say where a name first appeared; ``*_max_len`` the longest string value seen.
    """

    stable: str
    tbnames: list[str] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    column_types: dict[str, TDType] = field(default_factory=dict)
    tables: dict[str, dict[str, tuple[TDType, Any]]] = field(default_factory=dict)
    tag_types: dict[str, TDType] = field(default_factory=dict)
    column_lines: dict[str, int] = field(default_factory=dict)
    tag_lines: dict[str, int] = field(default_factory=dict)
    column_max_len: dict[str, int] = field(default_factory=dict)
    tag_max_len: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tbnames)

    def to_table(self, schema: StableSchema) -> pa.Table:
        """The rows-entry table under ``schema`` (apply the plan's columns first)."""
        cols: dict[str, Any] = dict(self.columns)
        cols[schema.columns[0].name] = self.ts
        return build_rows_table(schema, self.tbnames, cols)


def _merge_type(
    types: dict[str, TDType], lines: dict[str, int], key: str, t: TDType, what: str, line: int
) -> None:
    """Record ``t`` for ``key``: a string type widens, any other difference is a conflict."""
    prev = types.get(key)
    if prev is None:
        types[key] = t
        lines[key] = line
    elif prev != t:
        if prev.name != t.name or prev.length is None:
            raise SchemalessError(f"{what} {key[:40]!r} is {t} here but {prev} on line {lines[key]}", line)
        if t.length is not None and t.length > prev.length:
            types[key] = t


def group_rows(rows: Iterable[SchemalessRow]) -> dict[str, StableBatch]:
    """Group rows per supertable into column lists; raises when a field changes type."""
    out: dict[str, StableBatch] = {}
    for r in rows:
        b = out.get(r.stable)
        if b is None:
            b = out[r.stable] = StableBatch(r.stable)
        i = len(b.tbnames)
        b.tbnames.append(r.tbname)
        b.ts.append(r.ts)
        b.lines.append(r.line)
        cols, types, max_len = b.columns, b.column_types, b.column_max_len
        for k, (t, v) in r.columns.items():
            lst = cols.get(k)
            if lst is None:
                if k in b.tag_types:
                    raise SchemalessError(f"{k[:40]!r} is a tag on line {b.tag_lines[k]}", r.line)
                if len(cols) + len(b.tag_types) + 1 >= MAX_COLUMNS:  # the lines' union of names
                    raise SchemalessError.limit(too_many_columns(len(cols) + len(b.tag_types) + 2), r.line)
                lst = cols[k] = [None] * i
            elif len(lst) < i:
                lst.extend([None] * (i - len(lst)))
            lst.append(v)
            if types.get(k) is not t:
                _merge_type(types, b.column_lines, k, t, "field", r.line)
            if t.length is not None:
                n = _len_in(t.name, v)
                if n > max_len.get(k, -1):
                    max_len[k] = n
        if r.tbname not in b.tables:
            b.tables[r.tbname] = r.tags
            for k, (t, v) in r.tags.items():
                if k in cols:
                    raise SchemalessError(f"{k[:40]!r} is a field on line {b.column_lines[k]}", r.line)
                if k not in b.tag_types:
                    if len(b.tag_types) >= MAX_TAGS:
                        raise SchemalessError.limit(too_many_tags(len(b.tag_types) + 1), r.line)
                    if len(cols) + len(b.tag_types) + 1 >= MAX_COLUMNS:
                        raise SchemalessError.limit(too_many_columns(len(cols) + len(b.tag_types) + 2), r.line)
                if b.tag_types.get(k) is not t:
                    _merge_type(b.tag_types, b.tag_lines, k, t, "tag", r.line)
                if t.length is not None:
                    n = _len_in(t.name, v)
                    if n > b.tag_max_len.get(k, -1):
                        b.tag_max_len[k] = n
    for b in out.values():
        n = len(b.tbnames)
        for lst in b.columns.values():
            if len(lst) < n:
                lst.extend([None] * (n - len(lst)))
    return out


class SchemaPlan(NamedTuple):
    """What a batch needs from its supertable: columns/tags to add, strings to lengthen."""

    new_columns: list[Column]
    new_tags: list[Column]
    widen_columns: list[Column]
    widen_tags: list[Column]

    @property
    def empty(self) -> bool:
        return not (self.new_columns or self.new_tags or self.widen_columns or self.widen_tags)


def _sized(t: TDType, n: int) -> TDType:
    return _string_type(_kind(t), n) if t.length is not None else t


def _as_batch(current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]) -> StableBatch:
    if isinstance(rows, StableBatch):
        return rows
    groups = group_rows(rows)
    if len(groups) > 1:
        raise ValueError(f"rows of several supertables: {sorted(groups)[:3]}")
    if not groups:
        return StableBatch(current.name if current is not None else "")
    (b,) = groups.values()
    if current is not None and b.stable != current.name:
        raise ValueError(f"rows of {b.stable!r} against the schema of {current.name!r}")
    return b


def _convertible(t: TDType, v: Any) -> bool:
    try:
        check_value(t, v)
    except (TypeError_, ValueError, TypeError, OverflowError):
        return False
    return True


def plan_schema(current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]) -> SchemaPlan:
    """The schema changes TDengine's schemaless writer would make for these rows.

    With no supertable yet, ``new_columns`` starts with ``_ts TIMESTAMP`` and ``new_tags``
    is ``_tag_null NCHAR(1)`` when the rows have no tags, so the plan creates it whole.
    Raises SchemalessError when a field's type differs from its column's or a name is a
    field in the rows and a tag of the supertable (or the other way round). Deviation: an
    existing tag of another type (say INT, made by SQL) takes values convertible to it
    where TDengine refuses the write; a string tag takes NCHAR and VARCHAR values alike.
    """
    b = _as_batch(current, rows)
    _check_new_names(current, b)
    if current is None:
        for k in b.column_types:
            if k == TS_COLUMN:
                raise SchemalessError(f"field {k!r} is the timestamp column", b.column_lines[k])
        for k in b.tag_types:
            if k == TS_COLUMN:
                raise SchemalessError(f"tag {k!r} is the timestamp column", b.tag_lines[k])
        new_cols: list[Column] = [Column(TS_COLUMN, TIMESTAMP)]
        new_cols += [Column(k, _sized(t, b.column_max_len.get(k, 0))) for k, t in b.column_types.items()]
        new_tags: list[Column] = [Column(k, _sized(t, b.tag_max_len.get(k, 0))) for k, t in b.tag_types.items()]
        if not new_tags:
            new_tags = [Column(TAG_NULL, type_from_name("NCHAR", 1))]
        return SchemaPlan(new_cols, new_tags, [], [])
    col_of = {c.name: c for c in current.columns}
    tag_of = {c.name: c for c in current.tags}
    ts_name = current.columns[0].name
    new_cols = []
    widen_cols: list[Column] = []
    for k, t in b.column_types.items():
        line = b.column_lines[k]
        if k == ts_name:
            raise SchemalessError(f"field {k!r} is the timestamp column of {current.name}", line)
        if k in tag_of:
            raise SchemalessError(f"field {k[:40]!r} is a tag of {current.name}", line)
        c = col_of.get(k)
        if c is None:
            new_cols.append(Column(k, _sized(t, b.column_max_len.get(k, 0))))
        elif _kind(c.type) != _kind(t):
            raise SchemalessError(
                f"field {k[:40]!r} is {t.name} but column {k} of {current.name} is {c.type}", line
            )
        elif c.type.length is not None and b.column_max_len.get(k, 0) > c.type.length:
            widen_cols.append(Column(k, _sized(c.type, b.column_max_len[k])))
    new_tags = []
    widen_tags: list[Column] = []
    for k, t in b.tag_types.items():
        line = b.tag_lines[k]
        if k in col_of:
            raise SchemalessError(f"tag {k[:40]!r} is a column of {current.name}", line)
        c = tag_of.get(k)
        if c is None:
            new_tags.append(Column(k, _sized(t, b.tag_max_len.get(k, 0))))
        elif c.type.length is not None and t.length is not None:  # strings, NCHAR or VARCHAR
            kind = _kind(c.type)
            need = max((_len_in(kind, tags[k][1]) for tags in b.tables.values() if k in tags), default=0)
            if need > c.type.length:
                widen_tags.append(Column(k, _sized(c.type, need)))
        elif _kind(c.type) != _kind(t):
            for tags in b.tables.values():
                if k in tags and not _convertible(c.type, tags[k][1]):
                    raise SchemalessError(
                        f"tag {k[:40]!r} value {str(tags[k][1])[:40]!r} does not fit tag {k} {c.type}", line
                    )
    return SchemaPlan(new_cols, new_tags, widen_cols, widen_tags)


def _check_new_names(current: StableSchema | None, b: StableBatch) -> None:
    """Every name these rows would create passes `tsdb.names`' rule: the supertable, its new
    columns and tags, and the child tables (named by a tag, the tag values or the record key)."""
    if current is None:
        _check_new(b.stable, "table", "measurement", b.lines[0] if b.lines else 0)
    known = set() if current is None else {c.name for c in (*current.columns, *current.tags)}
    for k in b.column_types:
        if k not in known:
            _check_new(k, "column", "field key", b.column_lines[k])
    for k in b.tag_types:
        if k not in known:
            _check_new(k, "tag", "tag key", b.tag_lines[k])
    for tbname in b.tables:
        if not tbname.startswith("t_") or len(tbname) != 34:  # generated names are always legal
            _check_new(tbname, "table", "child table", b.lines[b.tbnames.index(tbname)])


def schema_delta(
    current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]
) -> tuple[list[Column], list[Column]]:
    """Columns and tags to add to ``current`` (None: to create) before writing ``rows``.

    Lengthening existing strings is in ``plan_schema(...).widen_columns/widen_tags``.
    """
    plan = plan_schema(current, rows)
    return plan.new_columns, plan.new_tags


def child_table_tags(schema: StableSchema, tags: dict[str, tuple[TDType, Any]]) -> dict[str, Any]:
    """A child table's tag values converted to ``schema``'s tag types (absent tags: None)."""
    out: dict[str, Any] = {}
    for c in schema.tags:
        got = tags.get(c.name)
        if got is None:
            out[c.name] = None
            continue
        try:
            out[c.name] = check_value(c.type, got[1])
        except (TypeError_, ValueError, TypeError, OverflowError) as e:
            raise SchemalessError(f"tag {c.name!r}: {e}", 0) from None
    return out
