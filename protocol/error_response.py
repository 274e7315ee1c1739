"""The error answer to a request, as Apache Kafka's ``AbstractRequest.getErrorResponse`` builds
one (sans-IO): a well-formed response of the request's API and version that carries one error.

Built from the request body and the response schema, not written per API:

- a response with a top-level ``ErrorCode`` (at that version) carries the error there, and
  nothing else (JoinGroup, Heartbeat, OffsetFetch v2-7, FindCoordinator v0-3, ...);
- otherwise the error goes on every entry the request named: the response's arrays of
  entries are paired with the request's arrays (same key, else the struct's only array, else
  ``_PAIRS``), one response entry per request entry, its identity fields (name, topic id,
  partition index, group id, resource ...) copied from the request entry, down to the first
  level whose entries have an ``ErrorCode``; below that, arrays are empty (as Kafka's
  DescribeGroups ``groupError`` or Metadata's topic entries with no partitions);
- "unknown" numbers are -1 where Kafka says so (offsets, epochs, timestamps, node id, ...);
- the quirks of Kafka's own: Fetch below v13 sets the top-level code AND every partition's
  (its clients read either) and echoes the session id, and Metadata sets only the topics' codes (not v13's top level);
- Produce with acks=0 has no answer (``None``): Kafka closes the connection instead;
- AlterUserScramCredentials answers each user its deletions and upsertions name, once, sorted.

``ErrorMessage`` fields next to a code get ``message`` (Kafka sends none for
UNKNOWN_SERVER_ERROR, so as not to leak internals).
"""

from __future__ import annotations

from typing import Any

from .codec import default_value
from .schemas import SCHEMAS, FieldSpec

__all__ = ["error_response"]

_PRODUCE, _FETCH, _METADATA, _DESCRIBE_LOG_DIRS = 0, 1, 3, 35
_ALTER_USER_SCRAM_CREDENTIALS = 51
_ADD_PARTITIONS_TO_TXN = 24

#: Top-level pairs the generic rule cannot find: response array key -> request array key
#: (None: Kafka answers with the array empty).
_PAIRS: dict[int, dict[str, str | None]] = {
    _FETCH: {"responses": "topics"},  # the request also has forgotten_topics_data
    _DESCRIBE_LOG_DIRS: {"results": None},  # results are log dirs, not the requested topics
}

#: A response field missing from the request entry may be named otherwise there.
_ALIASES: dict[str, tuple[str, ...]] = {"partition_index": ("partition", "index")}

#: Fields Kafka sets to -1 ("unknown") in its error answers.
_UNKNOWN = frozenset({
    "base_offset", "log_append_time_ms", "log_start_offset", "high_watermark", "last_stable_offset",
    "offset", "timestamp", "leader_epoch", "end_offset", "low_watermark", "committed_offset",
    "committed_leader_epoch", "generation_id", "producer_id", "producer_epoch", "node_id", "port",
})

_INT_TYPES = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})


def error_response(api_key: int, api_version: int, request: dict[str, Any], code: int,
                   message: str | None = None) -> dict[str, Any] | None:
    """The response body answering `request` (a decoded body of `api_key` v`api_version`) with
    error `code` and `message`; None when Kafka owes no answer (Produce with acks=0)."""
    if api_key == _PRODUCE and request.get("acks") == 0:
        return None
    if api_key == _ALTER_USER_SCRAM_CREDENTIALS:  # one result per user named, sorted (a set in Kafka)
        users = {e["name"] for e in (request.get("deletions") or []) + (request.get("upsertions") or [])}
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": int(code), "error_message": message} for u in sorted(users)]}
    if api_key == _ADD_PARTITIONS_TO_TXN and api_version < 4:  # v4+: the top-level code
        # every partition of the request carries the error (its field is PartitionErrorCode)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": int(code)} for p in t["partitions"]]}
            for t in request.get("v3_and_below_topics") or []]}
    v = api_version
    fields = [f for f in SCHEMAS[api_key].response.fields if f.present(v)]
    top = any(f.key == "error_code" for f in fields)
    entries = not top or (api_key == _FETCH and v < 13) or api_key == _METADATA
    if api_key == _METADATA:
        top = False
    out: dict[str, Any] = {}
    if top:
        _set_error(out, fields, code, message)
    if api_key == _FETCH and "session_id" in request:
        out["session_id"] = request["session_id"]
    for f in fields:
        if f.key in ("error_code", "error_message"):
            continue
        if f.key in _UNKNOWN and f.type in _INT_TYPES and not f.is_array:
            out[f.key] = -1
        elif entries and f.is_array and f.is_struct and _has_error(f, v):
            out[f.key] = _entries(api_key, f, _request_array(api_key, f.key, request, v), v, code, message)
    return out


def _set_error(out: dict[str, Any], fields: list[FieldSpec], code: int, message: str | None) -> None:
    for f in fields:
        if f.key == "error_code":
            out["error_code"] = int(code)
        elif f.key == "error_message":
            out["error_message"] = message


def _has_error(f: FieldSpec, v: int) -> bool:
    """Whether entries of struct array `f` carry an ErrorCode, at any depth."""
    assert f.fields is not None
    return any(s.key == "error_code" or (s.is_struct and _has_error(s, v))
               for s in f.fields if s.present(v))


def _request_array(api_key: int, key: str, request: dict[str, Any], v: int) -> list[Any] | None:
    """The request's array of entries the response array `key` answers (top level)."""
    pairs = _PAIRS.get(api_key, {})
    if key in pairs:
        name = pairs[key]
        return request.get(name) if name is not None else None
    spec = SCHEMAS[api_key].request
    return _pair(key, [f.key for f in spec.fields if f.present(v) and f.is_array], request)


def _pair(key: str, arrays: list[str], entry: dict[str, Any]) -> list[Any] | None:
    """The request entry's array answered by response array `key`: same key, else its only array."""
    chosen = key if key in arrays else (arrays[0] if len(arrays) == 1 else None)
    value = entry.get(chosen) if chosen is not None else None
    return value if isinstance(value, list) else None


def _entries(api_key: int, f: FieldSpec, wanted: list[Any] | None, v: int, code: int,
             message: str | None) -> list[dict[str, Any]]:
    """One response entry of struct array `f` per request entry of `wanted`."""
    if not wanted:
        return []
    assert f.fields is not None
    fields = [s for s in f.fields if s.present(v)]
    here = any(s.key == "error_code" for s in fields)
    identity = None
    out = []
    for item in wanted:
        entry: dict[str, Any] = {}
        if isinstance(item, dict):
            for s in fields:
                if s.is_array:
                    continue
                for name in (s.key, *_ALIASES.get(s.key, ())):
                    if name in item:
                        entry[s.key] = _fit(s, item[name], v)
                        break
        else:  # an array of names or indexes: the entry's first field of that type
            if identity is None:
                identity = _identity(fields, item)
            if identity is not None:
                entry[identity.key] = _fit(identity, item, v)
        for s in fields:
            if s.key in _UNKNOWN and s.type in _INT_TYPES and not s.is_array:
                entry[s.key] = -1
            elif s.type == "records" and not s.is_array:
                entry[s.key] = b""
        if here:
            _set_error(entry, fields, code, message)
        else:  # the error goes one level down
            for s in fields:
                if s.is_array and s.is_struct and _has_error(s, v):
                    sub = None
                    if isinstance(item, dict):
                        sub = _pair(s.key, [k for k, val in item.items() if isinstance(val, list)], item)
                    entry[s.key] = _entries(api_key, s, sub, v, code, message)
        out.append(entry)
    return out


def _identity(fields: list[FieldSpec], item: Any) -> FieldSpec | None:
    """The field of a response entry that names a request entry given as a bare value."""
    want = "string" if isinstance(item, str) or item is None else "int32"
    for s in fields:
        if not s.is_array and s.type == want and not s.key.startswith("error_"):
            return s
    return None


def _fit(s: FieldSpec, value: Any, v: int) -> Any:
    """`value` from the request, as the response field `s` can carry it at `v`."""
    if value is None and not s.nullable(v):
        return default_value(s, v)  # Kafka: "the response does not allow null" -> ""
    if s.type == "uuid" and value is not None:
        return bytes(value)
    return value
