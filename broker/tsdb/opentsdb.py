"""OpenTSDB JSON → schemaless rows, as TDengine's OpenTSDB JSON writer reads it.

* A document is an object (or a list of them) with exactly the keys metric, timestamp, value,
  tags. The supertable gets ``_ts``, ``_value`` and the tags (`ingest_rules` for the shared
  rules, `child_tables` for the table's name).
* Numbers are DOUBLE, strings NCHAR, true/false BOOL, and ``{"value": v, "type": t}`` picks a
  type (bool; i8/tinyint, i16/smallint, i32/int, i64/bigint, f32/float, f64/double;
  binary/varchar, nchar).
* A numeric timestamp of 10 digits is seconds, of 13 digits milliseconds, 0 is now; an object
  timestamp ``{"value": n, "type": "s"|"ms"|"us"|"ns"}`` states its unit.
* More than 128 tags on a data point is refused before any work per tag (``tsdb/limits.py``).

Deviation: errors name the index (1-based) of the data point instead of a line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from tmqgate.broker.tsdb.child_tables import table_of
from tmqgate.broker.tsdb.ingest_rules import (
    BOOL_V,
    FLOAT_MAX,
    INT64_MAX,
    INT_SUFFIX,
    JSON_VALUE_COLUMN,
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
from tmqgate.broker.tsdb.limits import MAX_TAGS, too_many_tags
from tmqgate.broker.tsdb.types import BIGINT, DOUBLE, FLOAT, TDType
from tmqgate.protocol import clock

__all__ = ["parse_opentsdb_json"]

_JSON_INT_TYPES: dict[str, tuple[TDType, int, int]] = {
    "i8": INT_SUFFIX["i8"], "tinyint": INT_SUFFIX["i8"],
    "i16": INT_SUFFIX["i16"], "smallint": INT_SUFFIX["i16"],
    "i32": INT_SUFFIX["i32"], "int": INT_SUFFIX["i32"],
    "i64": INT_SUFFIX["i64"], "bigint": INT_SUFFIX["i64"],
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
        return BOOL_V[v]
    if _json_number(v):
        fv = float(v)
        if not math.isfinite(fv):
            raise SchemalessError(f"{what}: number out of range for DOUBLE", line)
        return DOUBLE, fv
    if isinstance(v, str):
        return nchar_of(v, line), v
    if isinstance(v, dict):
        if len(v) != 2 or "value" not in v or not isinstance(v.get("type"), str):
            raise SchemalessError(f'{what}: a typed value is {{"value": ..., "type": "..."}}', line)
        val, typ = v["value"], v["type"].lower()
        if isinstance(val, bool):
            if typ != "bool":
                raise SchemalessError(f"{what}: type {v['type']!r} does not fit a boolean", line)
            return BOOL_V[val]
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
            if ft is FLOAT and abs(fv) > FLOAT_MAX:
                raise SchemalessError(f"{what}: {val} out of range for FLOAT", line)
            return ft, fv
        if isinstance(val, str):
            if typ in ("binary", "varchar"):
                return varchar_of(val, line), val
            if typ == "nchar":
                return nchar_of(val, line), val
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
        if ms > INT64_MAX:
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
                stable = dots(metric)
                check_name(stable, "metric", MAX_TABLE_NAME, i)
                tags: dict[str, tuple[TDType, Any]] = {}
                for k, tv in tags_in.items():
                    check_name(k, "tag key", MAX_COLUMN_NAME, i)
                    tags[k] = _json_value(tv, f"tag {k[:40]!r}", i)
                if JSON_VALUE_COLUMN in tags:
                    raise SchemalessError(f"tag {JSON_VALUE_COLUMN!r} clashes with the value column", i)
                got = (stable, *table_of(stable, tags, child_table_tag, child_table_delimiter, i))
                if key is not None:
                    heads[key] = got
            stable, tbname, tags = got
            rows.append(new_row(SchemalessRow, (stable, tbname, tags, {JSON_VALUE_COLUMN: value}, ts, i)))
        except (UnicodeError, OverflowError, RecursionError, ValueError) as e:
            if isinstance(e, SchemalessError):
                raise
            raise SchemalessError(f"invalid data point ({type(e).__name__})", i) from None
    return rows
