"""Hypothesis strategies for Kafka messages, derived from the JSON schemas (shared by the
protocol tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tmqgate.protocol.codec import default_value
from tmqgate.protocol.schemas import SCHEMAS, FieldSpec

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

ALL_APIS = sorted(SCHEMAS)
API_KINDS = [(k, kind) for k in ALL_APIS for kind in ("request", "response")]
ALL_COMBOS = [
    (k, v, kind)
    for k in ALL_APIS
    for v in range(SCHEMAS[k].min_version, SCHEMAS[k].max_version + 1)
    for kind in ("request", "response")
]


def _leaf(f: FieldSpec) -> st.SearchStrategy:
    t = f.type
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=8)
    if t == "bytes":
        return st.binary(max_size=12)
    if t == "records":
        return st.binary(max_size=40)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(t)


def field_strategy(f: FieldSpec, v: int, flexible: bool, unknown_tags: bool) -> st.SearchStrategy:
    nullable = f.nullable(v)
    if f.is_struct:
        elem = struct_strategy(f.fields, v, flexible, unknown_tags)
    else:
        elem = _leaf(f)
    if f.is_array:
        s = st.lists(elem, max_size=3)
    else:
        s = elem
    if nullable:
        s = st.none() | s
    return s


def struct_strategy(fields: tuple[FieldSpec, ...], v: int, flexible: bool,
                    unknown_tags: bool = True) -> st.SearchStrategy:
    """Dicts with any subset of the version's fields (missing ones must take defaults)."""
    optional: dict[str, st.SearchStrategy] = {
        f.key: field_strategy(f, v, flexible, unknown_tags) for f in fields if f.present(v)
    }
    if flexible and unknown_tags:
        optional["_unknown_tags"] = st.dictionaries(
            st.integers(1000, 200000), st.binary(max_size=6), min_size=1, max_size=2)
    return st.fixed_dictionaries({}, optional=optional)


def message_strategy(api_key: int, v: int, kind: str, unknown_tags: bool = True) -> st.SearchStrategy:
    schema = SCHEMAS[api_key]
    return struct_strategy(schema.spec(kind).fields, v, schema.flexible(v), unknown_tags)


def filled(fields: tuple[FieldSpec, ...], v: int, msg: dict) -> dict:
    """``msg`` with every missing field of version ``v`` set to its default (what decode returns)."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(v):
            continue
        if f.key not in msg:
            out[f.key] = default_value(f, v)
            continue
        val = msg[f.key]
        if f.is_struct and val is not None:
            val = [filled(f.fields, v, e) for e in val] if f.is_array else filled(f.fields, v, val)
        out[f.key] = val
    if msg.get("_unknown_tags"):
        out["_unknown_tags"] = dict(msg["_unknown_tags"])
    return out


def filled_message(api_key: int, v: int, kind: str, msg: dict) -> dict:
    return filled(SCHEMAS[api_key].spec(kind).fields, v, msg)
