"""The child table a schemaless row lands in, named as TDengine names it.

* Generated name: ``t_`` + md5 hex of the supertable name followed by ``,key=value`` for each
  tag, tags sorted by key case-insensitively (TDengine's buildChildTableName; string values
  hash as their UTF-8 bytes, typed JSON values as their little-endian binary form).
* With ``child_table_tag`` (TDengine's smlChildTableName) the value of that tag is the name
  and the tag itself is dropped; with ``child_table_delimiter``
  (smlAutoChildTableNameDelimiter) the tag values joined by it are the name when shorter than
  192 bytes. Dots in a chosen name become underscores; it is cut to 192 bytes.

Both parsers (`line_protocol`, `opentsdb`) name a row's table here, once per tag set.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from tmqgate.broker.tsdb.ingest_rules import MAX_TABLE_NAME, SchemalessError, dots
from tmqgate.broker.tsdb.types import TDType

__all__ = ["child_table_name", "table_of"]


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


def table_of(
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
            return dots(name), tags
    if child_table_tag is not None and child_table_tag in tags:
        tags = dict(tags)
        _, v = tags.pop(child_table_tag)
        name = _truncate_name(dots(v if isinstance(v, str) else str(v)))
        if name:
            return name, tags
        raise SchemalessError(f"tag {child_table_tag!r} names the child table but is empty", line)
    return child_table_name(stable, tags), tags
