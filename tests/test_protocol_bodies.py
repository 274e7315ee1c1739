"""protocol/bodies/ (the generated TypedDicts of every message) is current and says what the
codec really returns: the keys of decoded requests, of real clients' requests too."""

from __future__ import annotations

import importlib
import subprocess
import sys
import typing
import uuid
from pathlib import Path
from typing import Any, NotRequired, get_args, get_origin, get_type_hints

import pytest
from kafka.protocol.consumer import FetchRequest, JoinGroupRequest, ListOffsetsRequest, OffsetCommitRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from test_protocol_strategies import ALL_COMBOS

from tmqgate.protocol.codec import codec_for, default_value
from tmqgate.protocol.messages import decode_request, encode_request
from tmqgate.protocol.schemas import SCHEMAS, FieldSpec, snake_case

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "generate_messages.py"


def test_bodies_are_current() -> None:
    """A schema refresh that forgets to regenerate protocol/bodies/ fails here."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def _body_type(api_key: int, kind: str) -> type:
    schema = SCHEMAS[api_key]
    module = importlib.import_module(f"tmqgate.protocol.bodies.{snake_case(schema.name)}")
    return getattr(module, schema.spec(kind).name)  # type: ignore[no-any-return]


def _keys(td: type) -> tuple[set[str], set[str], dict[str, Any]]:
    """(required keys, all keys, hints) of a TypedDict; from its hints, as ``__required_keys__``
    misses ``NotRequired`` in string annotations before Python 3.14."""
    hints = get_type_hints(td, include_extras=True)
    total = td.__total__  # type: ignore[attr-defined]
    required = {k for k, h in hints.items() if total and get_origin(h) is not NotRequired}
    return required, set(hints), {k: get_args(h)[0] if get_origin(h) is NotRequired else h
                                  for k, h in hints.items()}


def _struct_of(hint: Any) -> type | None:
    """The TypedDict in ``T``, ``list[T]``, ``T | None`` or ``list[T] | None``, if any."""
    if typing.is_typeddict(hint):
        return hint  # type: ignore[no-any-return]
    for arg in get_args(hint):
        if (found := _struct_of(arg)) is not None:
            return found
    return None


def _check(value: dict[str, Any], td: type, where: str) -> int:
    """Assert ``value``'s keys fit ``td`` (every required key there, none unknown), nested
    structs too; the number of structs checked."""
    required, known, hints = _keys(td)
    assert required <= value.keys(), f"{where}: {td.__name__} lacks {required - value.keys()}"
    assert value.keys() <= known, f"{where}: {td.__name__} has no {value.keys() - known}"
    checked = 1
    for key, val in value.items():
        sub = _struct_of(hints[key])
        if sub is None or val is None:
            continue
        for item in val if isinstance(val, list) else [val]:
            checked += _check(item, sub, f"{where}.{key}")
    return checked


def _one_of_each(fields: tuple[FieldSpec, ...], v: int) -> dict[str, Any]:
    """Every field of version ``v`` set, each struct array with one element (so that decoding
    reaches every nested struct), nullable fields not null."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(v):
            continue
        if f.fields is not None:
            item = _one_of_each(f.fields, v)
            out[f.key] = [item] if f.is_array else item
        elif f.is_array:
            out[f.key] = []
        else:
            d = default_value(f, v)
            out[f.key] = d if d is not None else (b"" if f.type in ("bytes", "records") else "")
    return out


@pytest.mark.parametrize(("api_key", "v", "kind"), ALL_COMBOS)
def test_decoded_keys_fit_the_types(api_key: int, v: int, kind: str) -> None:
    """Every version of every message, decoded, has exactly the keys its TypedDict allows."""
    codec = codec_for(api_key, v, kind)
    wire = codec.encode(_one_of_each(SCHEMAS[api_key].spec(kind).fields, v))
    assert _check(codec.decode(wire), _body_type(api_key, kind), f"{codec}") >= 1


def _produce(v: int) -> Any:
    topic: dict[str, Any] = {"topic_id": uuid.UUID(int=1)} if v >= 13 else {"name": "orders"}
    return ProduceRequest[v](acks=-1, timeout_ms=1500, topic_data=[ProduceRequest.TopicProduceData(
        **topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(
            index=3, records=b"\x01\x02batch")])])


def _fetch(v: int) -> Any:
    topic: dict[str, Any] = {"topic_id": uuid.UUID(int=1)} if v >= 13 else {"topic": "orders"}
    return FetchRequest[v](max_wait_ms=500, min_bytes=1, topics=[FetchRequest.FetchTopic(
        **topic, partitions=[FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=7)])])


def _list_offsets(v: int) -> Any:
    return ListOffsetsRequest[v](replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="orders", partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=-1)])])


def _metadata(v: int) -> Any:
    return MetadataRequest[v](topics=[MetadataRequest.MetadataRequestTopic(name="orders")])


def _offset_commit(v: int) -> Any:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[v](group_id="g", topics=[topic(
        name="orders", partitions=[topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])


def _join_group(v: int) -> Any:
    return JoinGroupRequest[v](group_id="g", session_timeout_ms=10000, member_id="", protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                    metadata=b"m")])


REAL = [(0, _produce), (1, _fetch), (2, _list_offsets), (3, _metadata), (8, _offset_commit), (11, _join_group)]


@pytest.mark.parametrize(("api_key", "make"), REAL, ids=[SCHEMAS[k].name for k, _ in REAL])
def test_real_client_requests_fit_the_types(api_key: int, make: Any) -> None:
    """Requests kafka-python builds from its own objects, oldest and newest version we serve,
    decode to the keys of their TypedDict (nested structs included)."""
    schema = SCHEMAS[api_key]
    for v in (schema.min_version, schema.max_version):
        codec = codec_for(api_key, v, "request")
        header = encode_request(api_key, v, 1, "client", {})[4:-len(codec.encode({}))]
        req = decode_request(header + make(v).encode(version=v))
        assert _check(req.body, _body_type(api_key, "request"), f"{schema.name} v{v}") >= 2
