"""Kafka message schemas, loaded from Apache Kafka's JSON message definitions.

The JSON files in ``protocol/resources`` are Apache Kafka's own (``common/message/*.json`` of
the ``kafka-clients`` jar), vendored verbatim from the release the reference broker runs by
``scripts/refresh_schemas.py``, which records the release in ``resources/VERSION``.  Using the
upstream definitions instead of hand-written layouts means every field, version range,
nullability and tag is exactly what real clients expect.

The parsed form (:class:`FieldSpec`, :class:`MessageSpec`, :class:`ApiSchema`) is what
``protocol.codec`` compiles and what the tests build value strategies from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "ApiSchema",
    "FieldSpec",
    "JsonObject",
    "MessageSpec",
    "KAFKA_VERSION",
    "SCHEMAS",
    "Versions",
    "load_json_file",
    "snake_case",
]

#: A parsed JSON object (a schema, a field or a struct).
JsonObject = dict[str, Any]

#: Inclusive version range; ``None`` stands for "no versions" (Kafka's ``"none"``).
Versions = tuple[int, int] | None

MAX_VERSION = 0x7FFF

RESOURCES = Path(__file__).parent / "resources"

#: The Apache Kafka release the vendored schemas come from (first line of ``resources/VERSION``).
KAFKA_VERSION: str = (RESOURCES / "VERSION").read_text(encoding="utf-8").split("\n", 1)[0].strip()

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
     "string", "bytes", "records", "uuid"}
)

_COMMENT_LINE = re.compile(r"(?m)^\s*//.*$")
_SNAKE_1 = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SNAKE_2 = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` → ``throttle_time_ms`` (acronym runs stay together: ``ClusterID`` → ``cluster_id``)."""
    return _SNAKE_2.sub("_", _SNAKE_1.sub("_", name)).lower()


def parse_versions(text: str | None) -> Versions:
    """Parse Kafka's version syntax: ``"3+"``, ``"0-4"``, ``"7"``, ``"none"``."""
    if text is None:
        return None
    text = str(text).strip()
    if text == "" or text == "none":
        return None
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-", 1)
        return (int(lo), int(hi))
    return (int(text), int(text))


def in_versions(versions: Versions, v: int) -> bool:
    return versions is not None and versions[0] <= v <= versions[1]


@dataclass(frozen=True, eq=False)
class FieldSpec:
    """One field of a message or struct, as declared in the JSON schema."""

    name: str  # JSON name, e.g. "ThrottleTimeMs"
    key: str  # dict key, e.g. "throttle_time_ms"
    type: str  # element type: a primitive name or the struct's type name
    is_array: bool
    fields: tuple[FieldSpec, ...] | None  # struct members (struct or struct-array fields)
    versions: Versions
    nullable_versions: Versions = None
    tag: int | None = None
    tagged_versions: Versions = None
    flexible_versions: Versions = None  # per-field override (only RequestHeader.ClientId uses it)
    default: Any = None  # raw JSON default (None when absent)
    has_default: bool = False

    @property
    def is_struct(self) -> bool:
        return self.fields is not None

    def present(self, v: int) -> bool:
        return in_versions(self.versions, v)

    def nullable(self, v: int) -> bool:
        return in_versions(self.nullable_versions, v)

    def tagged(self, v: int) -> bool:
        return self.tag is not None and in_versions(self.tagged_versions, v)


@dataclass(frozen=True, eq=False)
class MessageSpec:
    """A request or response body schema."""

    name: str  # e.g. "ProduceRequest"
    kind: str  # "request" | "response" | "header" | "data"
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    fields: tuple[FieldSpec, ...]
    latest_unstable: bool = False
    json: JsonObject = field(default_factory=dict, repr=False)

    def flexible(self, v: int) -> bool:
        return in_versions(self.flexible_versions, v)


@dataclass(frozen=True, eq=False)
class ApiSchema:
    """Request and response schemas of one API key."""

    api_key: int
    name: str  # e.g. "Produce"
    request: MessageSpec
    response: MessageSpec
    min_version: int
    max_version: int
    flexible_min: int | None  # first flexible version, None if never flexible
    latest_unstable: bool = False

    def spec(self, kind: str) -> MessageSpec:
        if kind == "request":
            return self.request
        if kind == "response":
            return self.response
        raise ValueError(f"kind must be 'request' or 'response', not {kind!r}")

    def flexible(self, v: int) -> bool:
        return self.flexible_min is not None and v >= self.flexible_min


def load_json_file(path: Path) -> JsonObject:
    """Read one schema file: drop ``//`` comment lines, inline ``commonStructs``."""
    data: JsonObject = json.loads(_COMMENT_LINE.sub("", path.read_text(encoding="utf-8")))
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}
    if common:
        _resolve_common(data.get("fields", []), common)
    return data


def _resolve_common(fields: list[JsonObject], common: dict[str, list[JsonObject]]) -> None:
    for f in fields:
        t = f["type"]
        inner = t[2:] if t.startswith("[]") else t
        if "fields" not in f and inner in common:
            f["fields"] = common[inner]
        if "fields" in f:
            _resolve_common(f["fields"], common)


def _parse_field(j: JsonObject) -> FieldSpec:
    t = j["type"]
    is_array = t.startswith("[]")
    elem = t[2:] if is_array else t
    sub = j.get("fields")
    if sub is None and elem not in PRIMITIVE_TYPES:
        raise ValueError(f"field {j['name']}: unknown type {t!r}")
    if sub is not None and elem in PRIMITIVE_TYPES:
        raise ValueError(f"field {j['name']}: primitive type {t!r} with sub-fields")
    return FieldSpec(
        name=j["name"],
        key=snake_case(j["name"]),
        type=elem,
        is_array=is_array,
        fields=tuple(_parse_field(s) for s in sub) if sub is not None else None,
        versions=parse_versions(j.get("versions")),
        nullable_versions=parse_versions(j.get("nullableVersions")),
        tag=j.get("tag"),
        tagged_versions=parse_versions(j.get("taggedVersions")),
        flexible_versions=parse_versions(j["flexibleVersions"]) if "flexibleVersions" in j else None,
        default=j.get("default"),
        has_default="default" in j,
    )


def parse_message(data: JsonObject) -> MessageSpec:
    return MessageSpec(
        name=data["name"],
        kind=data["type"],
        api_key=data.get("apiKey"),
        valid_versions=parse_versions(data["validVersions"]),
        flexible_versions=parse_versions(data.get("flexibleVersions")),
        fields=tuple(_parse_field(f) for f in data.get("fields", [])),
        latest_unstable=bool(data.get("latestVersionUnstable", False)),
        json=data,
    )


@cache
def load_messages() -> dict[str, MessageSpec]:
    """All message specs by name."""
    out: dict[str, MessageSpec] = {}
    for path in sorted(RESOURCES.glob("*.json")):
        spec = parse_message(load_json_file(path))
        out[spec.name] = spec
    return out


def _build_schemas() -> dict[int, ApiSchema]:
    msgs = load_messages()
    reqs = {m.api_key: m for m in msgs.values() if m.kind == "request" and m.api_key is not None}
    resps = {m.api_key: m for m in msgs.values() if m.kind == "response" and m.api_key is not None}
    schemas: dict[int, ApiSchema] = {}
    for key in sorted(reqs):
        req, resp = reqs[key], resps.get(key)
        if resp is None or req.valid_versions is None:
            continue
        lo, hi = req.valid_versions
        if resp.valid_versions is not None:
            lo, hi = max(lo, resp.valid_versions[0]), min(hi, resp.valid_versions[1])
        flex = req.flexible_versions[0] if req.flexible_versions is not None else None
        schemas[key] = ApiSchema(
            api_key=key,
            name=req.name.removesuffix("Request"),
            request=req,
            response=resp,
            min_version=lo,
            max_version=hi,
            flexible_min=flex,
            latest_unstable=req.latest_unstable,
        )
    return schemas


#: Every API we can encode/decode, by api key.
SCHEMAS: dict[int, ApiSchema] = _build_schemas()

#: Request / response header schemas (used by tests; ``protocol.messages`` hand-codes the headers).
REQUEST_HEADER: MessageSpec = load_messages()["RequestHeader"]
RESPONSE_HEADER: MessageSpec = load_messages()["ResponseHeader"]
