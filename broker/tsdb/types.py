"""TDengine column types, their Arrow storage types, and literal checks for INSERT.

Timestamps are kept as int64 milliseconds since the epoch (database precision 'ms').
Timestamp strings without an offset are read as UTC (TDengine would use the client's
timezone; a broker has no client timezone, so UTC keeps results reproducible).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tmqgate.protocol import clock

__all__ = [
    "TDType",
    "Column",
    "StableSchema",
    "TypeError_",
    "parse_type",
    "type_from_name",
    "check_value",
    "parse_timestamp",
    "duration_ms",
    "NowValue",
    "INTEGER_RANGES",
    "VARCHAR_MAX",
    "NCHAR_MAX",
    "TIMESTAMP",
    "BOOL",
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "UTINYINT",
    "USMALLINT",
    "UINT",
    "UBIGINT",
    "FLOAT",
    "DOUBLE",
]

VARCHAR_MAX = 65517
NCHAR_MAX = 16379
FLOAT_MAX = 3.4028234663852886e38


class TypeError_(ValueError):
    """A type name or a literal value that TDengine would refuse (message says why)."""


@dataclass(frozen=True)
class TDType:
    """A TDengine column type: its printed name, Arrow type and length (VARCHAR/NCHAR only)."""

    name: str
    arrow: pa.DataType = field(compare=False)
    length: int | None = None

    def __str__(self) -> str:
        return f"{self.name}({self.length})" if self.length is not None else self.name

    @property
    def is_integer(self) -> bool:
        return self.name in INTEGER_RANGES

    @property
    def is_unsigned(self) -> bool:
        return self.name.endswith("UNSIGNED")

    @property
    def is_float(self) -> bool:
        return self.name in ("FLOAT", "DOUBLE")

    @property
    def is_numeric(self) -> bool:
        return self.is_integer or self.is_float

    @property
    def is_string(self) -> bool:
        return self.name in ("VARCHAR", "NCHAR")

    @property
    def is_timestamp(self) -> bool:
        return self.name == "TIMESTAMP"

    @property
    def is_bool(self) -> bool:
        return self.name == "BOOL"

    @property
    def bytes(self) -> int:
        """Storage width as TDengine reports it in DESCRIBE (strings: declared length)."""
        if self.is_string:
            return self.length or 0
        return self.arrow.bit_width // 8 if self.arrow != pa.bool_() else 1


@dataclass(frozen=True)
class Column:
    """A named column or tag of a supertable."""

    name: str
    type: TDType


@dataclass
class StableSchema:
    """A supertable: columns (columns[0] is the TIMESTAMP) and tags."""

    name: str
    columns: list[Column]
    tags: list[Column]

    def find(self, name: str) -> Column | None:
        """Column or tag by name, case-insensitively (TDengine names are case-insensitive)."""
        for c in self.columns:
            if c.name == name:
                return c
        for c in self.tags:
            if c.name == name:
                return c
        low = name.lower()
        for c in (*self.columns, *self.tags):
            if c.name.lower() == low:
                return c
        return None

    def is_tag(self, name: str) -> bool:
        col = self.find(name)
        return col is not None and any(t is col for t in self.tags)

    def arrow_schema(self, with_tbname: bool = True, with_tags: bool = True) -> pa.Schema:
        """The Arrow schema of a rows table: tbname, columns, then (optionally) tags."""
        fields = [pa.field("tbname", pa.string())] if with_tbname else []
        fields += [pa.field(c.name, c.type.arrow) for c in self.columns]
        if with_tags:
            fields += [pa.field(t.name, t.type.arrow) for t in self.tags]
        return pa.schema(fields)


TIMESTAMP = TDType("TIMESTAMP", pa.int64())
BOOL = TDType("BOOL", pa.bool_())
TINYINT = TDType("TINYINT", pa.int8())
SMALLINT = TDType("SMALLINT", pa.int16())
INT = TDType("INT", pa.int32())
BIGINT = TDType("BIGINT", pa.int64())
UTINYINT = TDType("TINYINT UNSIGNED", pa.uint8())
USMALLINT = TDType("SMALLINT UNSIGNED", pa.uint16())
UINT = TDType("INT UNSIGNED", pa.uint32())
UBIGINT = TDType("BIGINT UNSIGNED", pa.uint64())
FLOAT = TDType("FLOAT", pa.float32())
DOUBLE = TDType("DOUBLE", pa.float64())

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "TINYINT UNSIGNED": (0, 2**8 - 1),
    "SMALLINT UNSIGNED": (0, 2**16 - 1),
    "INT UNSIGNED": (0, 2**32 - 1),
    "BIGINT UNSIGNED": (0, 2**64 - 1),
}

_FIXED: dict[str, TDType] = {
    "TIMESTAMP": TIMESTAMP,
    "BOOL": BOOL,
    "BOOLEAN": BOOL,
    "TINYINT": TINYINT,
    "SMALLINT": SMALLINT,
    "INT": INT,
    "INTEGER": INT,
    "BIGINT": BIGINT,
    "TINYINT UNSIGNED": UTINYINT,
    "SMALLINT UNSIGNED": USMALLINT,
    "INT UNSIGNED": UINT,
    "INTEGER UNSIGNED": UINT,
    "BIGINT UNSIGNED": UBIGINT,
    "FLOAT": FLOAT,
    "DOUBLE": DOUBLE,
}

_TYPE_RE = re.compile(r"^\s*([A-Za-z]+(?:\s+[A-Za-z]+)?)\s*(?:\(\s*([+-]?\d+)\s*\))?\s*$")


def varchar(n: int) -> TDType:
    """VARCHAR(n): n counts bytes of UTF-8."""
    if not 1 <= n <= VARCHAR_MAX:
        raise TypeError_(f"invalid length {n} for VARCHAR: must be 1..{VARCHAR_MAX}")
    return TDType("VARCHAR", pa.string(), n)


def nchar(n: int) -> TDType:
    """NCHAR(n): n counts characters."""
    if not 1 <= n <= NCHAR_MAX:
        raise TypeError_(f"invalid length {n} for NCHAR: must be 1..{NCHAR_MAX}")
    return TDType("NCHAR", pa.string(), n)


def type_from_name(name: str, length: int | None = None) -> TDType:
    """A type from its (already split) name and optional length; raises TypeError_."""
    key = " ".join(name.upper().split())
    if key in ("VARCHAR", "BINARY"):
        if length is None:
            raise TypeError_(f"{key} needs a length, e.g. {key}(64)")
        return varchar(length)
    if key == "NCHAR":
        if length is None:
            raise TypeError_("NCHAR needs a length, e.g. NCHAR(64)")
        return nchar(length)
    t = _FIXED.get(key)
    if t is None:
        raise TypeError_(f"unknown data type {name!r}")
    if length is not None:
        raise TypeError_(f"data type {t.name} takes no length")
    return t


def parse_type(text: str) -> TDType:
    """Parse a type as written in DDL: 'VARCHAR(64)', 'int unsigned', 'BINARY(8)'."""
    m = _TYPE_RE.match(text)
    if not m:
        raise TypeError_(f"cannot parse data type {text!r}")
    return type_from_name(m.group(1), int(m.group(2)) if m.group(2) is not None else None)


# --- literal values -------------------------------------------------------------------


@dataclass(frozen=True)
class NowValue:
    """NOW (or TODAY() when `day`: midnight UTC), optionally shifted by a duration
    (NOW - 1h); resolved when the row is written, not when the text is parsed."""

    offset_ms: int = 0
    day: bool = False

    def resolve(self, now_ms: int | None = None) -> int:
        now = now_ms if now_ms is not None else clock.now_ms()
        if self.day:
            now -= now % 86_400_000
        return now + self.offset_ms


_DURATION_MS = {"a": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION_RE = re.compile(r"^(\d+)([a-zA-Z])$")


def duration_ms(text: str) -> int:
    """A TDengine duration literal in ms: 10a (ms), 5s, 3m, 2h, 1d, 1w.

    b (ns) and u (µs) cannot be exact in a millisecond database, and n/y (month, year) have
    no fixed length, so they are refused.
    """
    m = _DURATION_RE.match(text.strip())
    if not m:
        raise TypeError_(f"invalid duration {text!r}")
    unit = m.group(2).lower()
    if unit not in _DURATION_MS:
        raise TypeError_(f"unsupported duration unit {m.group(2)!r} in {text!r}: use a, s, m, h, d or w")
    return int(m.group(1)) * _DURATION_MS[unit]


_TS_RE = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)


def parse_timestamp(text: str) -> int:
    """'YYYY-MM-DD[ HH:MM[:SS[.fff…]]][Z|±HH[:MM]]' → ms since the epoch (UTC when no offset)."""
    m = _TS_RE.match(text)
    if not m:
        raise TypeError_(f"invalid timestamp {text!r}: expected 'YYYY-MM-DD HH:MM:SS[.fff]'")
    y, mo, d, hh, mi, ss, frac, tz = m.groups()
    try:
        dt = _dt.datetime(int(y), int(mo), int(d), int(hh or 0), int(mi or 0), int(ss or 0))
    except ValueError as e:
        raise TypeError_(f"invalid timestamp {text!r}: {e}") from None
    offset = 0
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0))
    epoch = _dt.datetime(1970, 1, 1)
    secs = (dt - epoch) // _dt.timedelta(seconds=1)
    ms = secs * 1000 + (int((frac or "0").ljust(3, "0")[:3]))
    return ms - offset * 60_000


def _as_int(v: Any, t: TDType) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise TypeError_(f"value {v!r} is not an integer for {t}")
        return int(v)
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s, 0) if s.lower().startswith(("0x", "-0x", "+0x")) else int(s)
        except ValueError:
            try:
                return _as_int(float(s), t)
            except ValueError:
                raise TypeError_(f"value {v!r} is not an integer for {t}") from None
    raise TypeError_(f"value {v!r} does not fit {t}")


def check_value(tdtype: TDType, value: Any, *, now_ms: int | None = None) -> Any:
    """Convert an INSERT/TAGS literal to the Python value stored for `tdtype`, or raise TypeError_.

    Accepts the parser's literals (int, float, str, bool, None, NowValue). Integers must be in
    the type's range; FLOAT must be finite and within float32; VARCHAR(n) counts UTF-8 bytes,
    NCHAR(n) counts characters; BOOL takes TRUE/FALSE, 'true'/'false' and numbers (non-zero is
    true); TIMESTAMP takes integer ms, timestamp strings, NOW and NOW ± duration.
    """
    if value is None:
        return None
    if isinstance(value, NowValue):
        if tdtype.is_timestamp:
            return value.resolve(now_ms)
        if tdtype.is_integer:
            value = value.resolve(now_ms)
        else:
            raise TypeError_(f"NOW is not a valid {tdtype} value")
    if tdtype.is_timestamp:
        return _timestamp_value(tdtype, value, now_ms)
    if tdtype.is_integer:
        iv = _as_int(value, tdtype)
        lo, hi = INTEGER_RANGES[tdtype.name]
        if not lo <= iv <= hi:
            raise TypeError_(f"value {value!r} out of range for {tdtype} [{lo}, {hi}]")
        return iv
    if tdtype.is_float:
        return _float_value(tdtype, value)
    if tdtype.is_bool:
        return _bool_value(value)
    if tdtype.is_string:
        return _string_value(tdtype, value)
    raise TypeError_(f"unsupported type {tdtype}")


def _timestamp_value(tdtype: TDType, value: Any, now_ms: int | None) -> int:
    """Integer ms, a timestamp string, 'now' (NOW itself is resolved by the caller)."""
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"[+-]?\d+", s):
            ms = int(s)
        elif s.lower() == "now":
            return NowValue().resolve(now_ms)
        else:
            ms = parse_timestamp(s)
    elif isinstance(value, bool):
        raise TypeError_(f"value {value!r} is not a valid TIMESTAMP")
    else:
        ms = _as_int(value, tdtype)
    lo, hi = INTEGER_RANGES["BIGINT"]
    if not lo <= ms <= hi:
        raise TypeError_(f"timestamp {value!r} out of range")
    return ms


def _float_value(tdtype: TDType, value: Any) -> float:
    """FLOAT / DOUBLE: finite, and FLOAT within float32."""
    if isinstance(value, bool):
        fv = float(value)
    elif isinstance(value, int | float):
        fv = float(value)
    elif isinstance(value, str):
        try:
            fv = float(value.strip())
        except ValueError:
            raise TypeError_(f"value {value!r} is not a number for {tdtype}") from None
    else:
        raise TypeError_(f"value {value!r} does not fit {tdtype}")
    if not math.isfinite(fv):
        raise TypeError_(f"value {value!r} out of range for {tdtype}")
    if tdtype.name == "FLOAT" and abs(fv) > FLOAT_MAX:
        raise TypeError_(f"value {value!r} out of range for FLOAT")
    return fv


def _bool_value(value: Any) -> bool:
    """TRUE / FALSE, 'true' / 'false', or a number (non-zero is true)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        s = value.strip().lower()
        if s in ("true", "false"):
            return s == "true"
        try:
            return float(s) != 0
        except ValueError:
            pass
    raise TypeError_(f"value {value!r} is not a valid BOOL")


def _string_value(tdtype: TDType, value: Any) -> str:
    """VARCHAR(n) counts UTF-8 bytes, NCHAR(n) characters."""
    if isinstance(value, bool):
        s = "true" if value else "false"
    elif isinstance(value, int | float | str):
        s = value if isinstance(value, str) else repr(value)
    else:
        raise TypeError_(f"value {value!r} does not fit {tdtype}")
    n = len(s.encode("utf-8")) if tdtype.name == "VARCHAR" else len(s)
    if tdtype.length is not None and n > tdtype.length:
        unit = "bytes" if tdtype.name == "VARCHAR" else "characters"
        raise TypeError_(f"value too long for {tdtype}: {n} {unit}")
    return s
