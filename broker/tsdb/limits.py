"""TDengine 3.x's schema limits (its `tdef.h`) and the error codes it refuses them with
(`taoserror.h`), in one place for every path that makes or widens a supertable: SQL CREATE
STABLE / ALTER STABLE … ADD COLUMN / ADD TAG (broker/sql), and schemaless writes (line
protocol, OpenTSDB JSON) through Produce (broker/tsdb/line_protocol.py, opentsdb.py,
schema_plan.py; broker/sql/ingest.py).

* columns (the timestamp included) plus tags: at most 4,096 (TSDB_MAX_COLUMNS; TDengine's
  parser counts both, `ncols + ntags > TSDB_MAX_COLUMNS`);
* tags: at most 128 (TSDB_MAX_TAGS);
* a row: at most 65,531 bytes (TSDB_MAX_BYTES_PER_ROW since 3.0.5), each column counted as
  TDengine stores it: fixed types their width, VARCHAR(n) n + 2, NCHAR(n) 4n + 2;
* the tags of a table: at most 16,384 bytes (TSDB_MAX_TAGS_LEN), counted the same way; one
  string tag longer than that alone is TSDB_CODE_PAR_INVALID_VAR_COLUMN_LEN.

The longest VARCHAR / NCHAR column (65,517 bytes / 16,379 characters) are `types.py`'s
VARCHAR_MAX / NCHAR_MAX. Schemaless parsing checks the counts per line before it splits a
line's fields or tags further than the limit (`str.split` with a maxsplit), so a line of
100,000 fields costs a split of 4,096; the byte lengths are checked on the schema a write
would make (`schema_problem`), before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.types import StableSchema, TDType

__all__ = [
    "INVALID_ROW_LENGTH",
    "INVALID_TAGS_LENGTH",
    "INVALID_TAGS_NUM",
    "INVALID_VAR_COLUMN_LEN",
    "MAX_BYTES_PER_ROW",
    "MAX_COLUMNS",
    "MAX_FIELDS",
    "MAX_TAGS",
    "MAX_TAGS_LEN",
    "LimitProblem",
    "schema_problem",
    "stored_bytes",
    "too_many_columns",
    "too_many_tags",
]

MAX_COLUMNS = 4096  # TSDB_MAX_COLUMNS: columns (timestamp included) + tags
MAX_TAGS = 128  # TSDB_MAX_TAGS
MAX_BYTES_PER_ROW = 65531  # TSDB_MAX_BYTES_PER_ROW
MAX_TAGS_LEN = 16384  # TSDB_MAX_TAGS_LEN
MAX_FIELDS = MAX_COLUMNS - 1  # schemaless fields of a line (the timestamp column is the other)
_VARSTR_HEADER = 2  # VARSTR_HEADER_SIZE
_NCHAR_SIZE = 4  # TSDB_NCHAR_SIZE: NCHAR is stored as UCS-4

# TDengine's codes (TSDB_CODE_PAR_*) and their texts (taos_errstr)
INVALID_TAGS_LENGTH = 0x263D  # "Tags length exceeds max length"
INVALID_ROW_LENGTH = 0x263E  # "Row length exceeds max length"
TOO_MANY_COLUMNS = 0x2640  # "Too many columns"
INVALID_VAR_COLUMN_LEN = 0x2642  # "Invalid binary/nchar column/tag length"
INVALID_TAGS_NUM = 0x2643  # "Invalid number of tag columns"


class LimitProblem(NamedTuple):
    """A limit a schema or a line goes past: TDengine's code and a message led by its text."""

    code: int
    message: str


def too_many_columns(count: int) -> LimitProblem:
    return LimitProblem(TOO_MANY_COLUMNS, f"Too many columns: {count} columns and tags, at most {MAX_COLUMNS} "
                                          "(the timestamp included)")


def too_many_tags(count: int) -> LimitProblem:
    return LimitProblem(INVALID_TAGS_NUM, f"Invalid number of tag columns: {count} tags, at most {MAX_TAGS}")


def stored_bytes(t: TDType) -> int:
    """A column's or tag's bytes in TDengine's row: strings with their 2-byte length, NCHAR as UCS-4."""
    if t.name == "VARCHAR":
        return (t.length or 0) + _VARSTR_HEADER
    if t.name == "NCHAR":
        return (t.length or 0) * _NCHAR_SIZE + _VARSTR_HEADER
    return t.bytes


def schema_problem(schema: StableSchema) -> LimitProblem | None:
    """The first of TDengine's limits `schema` goes past (None: within all of them)."""
    ntags = len(schema.tags)
    if ntags > MAX_TAGS:
        return too_many_tags(ntags)
    if len(schema.columns) + ntags > MAX_COLUMNS:
        return too_many_columns(len(schema.columns) + ntags)
    row = sum(stored_bytes(c.type) for c in schema.columns)
    if row > MAX_BYTES_PER_ROW:
        return LimitProblem(INVALID_ROW_LENGTH, f"Row length exceeds max length {MAX_BYTES_PER_ROW}: the columns "
                                                f"of {schema.name} take {row} bytes")
    for t in schema.tags:
        if t.type.is_string and stored_bytes(t.type) > MAX_TAGS_LEN:
            return LimitProblem(INVALID_VAR_COLUMN_LEN, f"Invalid binary/nchar column/tag length: tag {t.name} "
                                                        f"{t.type} takes {stored_bytes(t.type)} bytes, at most "
                                                        f"{MAX_TAGS_LEN}")
    tags = sum(stored_bytes(t.type) for t in schema.tags)
    if tags > MAX_TAGS_LEN:
        return LimitProblem(INVALID_TAGS_LENGTH, f"Tags length exceeds max length {MAX_TAGS_LEN}: the tags of "
                                                 f"{schema.name} take {tags} bytes")
    return None
