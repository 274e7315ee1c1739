"""What schemaless ingestion makes, and the rules both of its formats share.

Both parsers (`line_protocol`, `opentsdb`) produce `SchemalessRow`s and refuse input with
`SchemalessError`; `schema_plan` turns the rows into supertable changes. The rules follow
TDengine 3.x's reference "Schemaless Writing" (docs/en/14-reference/13-schemaless), the
developer guide pages on InfluxDB line protocol and OpenTSDB JSON, and its client
(source/client/src/clientSml*.c):

* New supertables get the timestamp column ``_ts`` (OpenTSDB JSON also ``_value``); one
  created with no tags at all gets TDengine's ``_tag_null NCHAR(1)``.
* String lengths (TDengine's smlFindNearestPowerOf2): a new VARCHAR/NCHAR column or tag, or
  a grown one, is sized to the smallest power of two above the longest value when that value
  is under 1024, otherwise exactly the value's length; capped at the type's maximum. VARCHAR
  lengths count UTF-8 bytes, NCHAR lengths characters (as ``types.py`` defines them).
* Integer types and their ranges by TDengine's suffix names (``i8`` … ``u64``), shared by the
  line-protocol suffixes and OpenTSDB JSON's typed values.
* Names: dots in the supertable name (and in a chosen child table name) become underscores;
  every name a write creates passes `tsdb.names`' rule as a quoted (escaped) name.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from tmqgate.broker.tsdb.limits import LimitProblem
from tmqgate.broker.tsdb.names import Kind, name_problem
from tmqgate.broker.tsdb.types import (
    BIGINT,
    BOOL,
    INT,
    NCHAR_MAX,
    SMALLINT,
    TINYINT,
    UBIGINT,
    UINT,
    USMALLINT,
    UTINYINT,
    VARCHAR_MAX,
    TDType,
    type_from_name,
)

__all__ = [
    "BOOL_V",
    "FLOAT_MAX",
    "INT64_MAX",
    "INT_SUFFIX",
    "JSON_VALUE_COLUMN",
    "MAX_COLUMN_NAME",
    "MAX_TABLE_NAME",
    "TAG_NULL",
    "TS_COLUMN",
    "SchemalessError",
    "SchemalessRow",
    "check_name",
    "check_new",
    "dots",
    "len_in",
    "nchar_of",
    "new_row",
    "string_length",
    "string_type",
    "varchar_of",
]

TS_COLUMN = "_ts"
JSON_VALUE_COLUMN = "_value"
TAG_NULL = "_tag_null"
MAX_TABLE_NAME = 192  # bytes, TSDB_TABLE_NAME_LEN - 1
MAX_COLUMN_NAME = 64  # bytes, TSDB_COL_NAME_LEN - 1
INT64_MAX = 2**63 - 1
FLOAT_MAX = 3.4028234663852886e38


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


new_row = tuple.__new__  # SchemalessRow without the Python-level __new__ (hot loops)


# --- types ----------------------------------------------------------------------------


def string_length(n: int) -> int:
    """TDengine's declared length for a new string column holding values up to ``n`` long."""
    return n if n >= 1024 else 1 << n.bit_length()


@lru_cache(maxsize=4096)
def string_type(kind: str, n: int) -> TDType:
    """VARCHAR/NCHAR sized by ``string_length`` for a value of length ``n`` (cached)."""
    return type_from_name(kind, min(string_length(n), VARCHAR_MAX if kind == "VARCHAR" else NCHAR_MAX))


def len_in(kind: str, s: str) -> int:
    """A string's length in the unit of ``kind``: bytes for VARCHAR, characters for NCHAR."""
    if kind == "NCHAR" or s.isascii():
        return len(s)
    return len(s.encode("utf-8", "surrogatepass"))


_VARCHAR_BY_LEN: dict[int, TDType] = {}
_NCHAR_BY_LEN: dict[int, TDType] = {}


def varchar_of(s: str, line: int) -> TDType:
    """The VARCHAR type a string value creates, sized for it (refused past VARCHAR_MAX bytes)."""
    n = len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))
    t = _VARCHAR_BY_LEN.get(n)
    if t is None:
        if n > VARCHAR_MAX:
            raise SchemalessError(f"string of {n} bytes is longer than VARCHAR allows ({VARCHAR_MAX})", line)
        t = _VARCHAR_BY_LEN[n] = string_type("VARCHAR", n)
    return t


def nchar_of(s: str, line: int) -> TDType:
    """The NCHAR type a string value creates, sized for it (refused past NCHAR_MAX characters)."""
    n = len(s)
    t = _NCHAR_BY_LEN.get(n)
    if t is None:
        if n > NCHAR_MAX:
            raise SchemalessError(f"string of {n} characters is longer than NCHAR allows ({NCHAR_MAX})", line)
        t = _NCHAR_BY_LEN[n] = string_type("NCHAR", n)
    return t


# integer suffix → (type, min, max); float suffix → type
INT_SUFFIX: dict[str, tuple[TDType, int, int]] = {
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
BOOL_V = {True: (BOOL, True), False: (BOOL, False)}


# --- names ----------------------------------------------------------------------------


def dots(name: str) -> str:
    """TDengine turns the dots of a supertable or chosen child table name into underscores."""
    return name.replace(".", "_") if "." in name else name


def check_name(name: str, what: str, limit: int, line: int) -> None:
    """Early refusal while parsing (`limit` is `tsdb.names`' for the kind of `what`)."""
    check_new(name, _KIND_OF.get(what, "column"), what, line)


# What each name a schemaless line makes is, for `tsdb.names`' rule (checked in full where the
# name is made: `plan_schema` for supertables, columns, tags and child tables).
_KIND_OF: dict[str, Kind] = {"measurement": "table", "metric": "table", "tag key": "tag", "field key": "column"}


def check_new(name: str, kind: Kind, what: str, line: int) -> None:
    """`tsdb.names`' rule for a name schemaless writing creates (TDengine quotes these names,
    so the escaped-name rules apply; '.' was already turned into '_')."""
    problem = name_problem(name, kind, quoted=True)
    if problem is not None:
        raise SchemalessError(f"{what}: {problem}", line)
