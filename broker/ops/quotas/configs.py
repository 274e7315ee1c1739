"""Client quota entities and their values: AlterClientQuotas' checks and DescribeClientQuotas.

Rules (Kafka's ClientQuotaControlManager, ClientQuotasImage):

- An entity is a set of (type, name) with types `user`, `client-id` (together or alone) or
  `ip` (alone); a name of None is the type's default entity (`<default>`). User and client-id
  entities take `producer_byte_rate`, `consumer_byte_rate` (integral, bytes/s),
  `request_percentage` and `controller_mutation_rate`; ip entities `connection_creation_rate`.
  Every value must be > 0 (their enforcement: broker/ops/quotas/client_quotas.py).
- AlterClientQuotas is checked entity by entity (an entity's changes all apply or none do),
  in one WriteBatch (`storage.quotas`); `validate_only` checks and writes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.storage import Store

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Kafka's QuotaConfig: the keys each kind of entity takes, with their ConfigDef types.
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                    REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_MAX = {"SHORT": (2**15 - 1, "a SHORT"), "INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}

#: Match types of a DescribeClientQuotas filter component.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]  # (type, name or None = default), sorted by type


def entity_text(entity: Mapping[str, str | None]) -> str:
    """Kafka's ClientQuotaEntity.toString (its HashMap puts client-id before user)."""
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in sorted(entity.items()))
    return f"ClientQuotaEntity(entries={{{inner}}})"


class QuotaError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _check_value(valid: Mapping[str, str], key: str, value: float) -> str | None:
    """Kafka's validateQuotaKeyValue: the message of the refusal, or None."""
    kind = valid.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None
    limit, name = _MAX[kind]
    if value > limit:
        return f"Proposed value for {key} is too large for {name}."
    if abs(value % 1.0) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@dataclass
class AlterResult:
    entity: list[tuple[str, str | None]]  # as the response lists it
    code: ErrorCode = ErrorCode.NONE
    message: str | None = None


class QuotaConfigs:
    """The entities and their values, persisted in the store; `version` changes on every
    alteration (the throttling's caches key on it)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.entities: dict[Entity, dict[str, float]] = store.load_client_quotas()
        self.version = 0

    def reload(self) -> None:
        self.entities = self._store.load_client_quotas()
        self.version += 1

    def alter(self, entries: list[dict[str, Any]], validate_only: bool,
              resolvable: Mapping[str, bool] | None = None) -> list[AlterResult]:
        """AlterClientQuotas: Kafka's controller's checks entity by entity; `resolvable` says
        which ip entity names that are not addresses resolve as host names."""
        results: dict[Entity, AlterResult] = {}
        changes: dict[Entity, dict[str, float]] = {}
        for entry in entries:
            as_map: dict[str, str | None] = {}
            for e in entry["entity"]:
                as_map[e["entity_type"]] = e["entity_name"]  # a Java HashMap: the last one wins
            entity: Entity = tuple(sorted(as_map.items()))
            result = AlterResult(list(entity))
            ops: dict[str, float | None] = {}
            error: str | None = None
            for op in entry["ops"]:
                if op["key"] in ops:
                    error = "duplicate key"
                else:
                    ops[op["key"]] = None if op["remove"] else float(op["value"])
            if error is not None or entity in results:
                # Kafka's controller files a duplicate key's error under the entity, then finds
                # the entity already answered: both read "Ignoring duplicate entity".
                results[entity] = AlterResult(list(entity), ErrorCode.INVALID_REQUEST,
                                              f"Ignoring duplicate entity {entity_text(as_map)}")
                continue
            results[entity] = result
            error = self._check_entity(as_map, resolvable or {})
            if error is not None:
                result.code, result.message = ErrorCode.INVALID_REQUEST, error
                continue
            valid = IP_KEYS if IP in as_map else USER_CLIENT_KEYS
            current = changes.get(entity, self.entities.get(entity, {}))
            new = dict(current)
            for key, value in ops.items():
                if value is None:
                    new.pop(key, None)
                    continue
                error = _check_value(valid, key, value)
                if error is not None:
                    break
                new[key] = value
            if error is not None:
                result.code, result.message = ErrorCode.INVALID_REQUEST, error
                continue
            if new != current:
                changes[entity] = new
        if changes and not validate_only:
            self._store.write_client_quotas(changes.items())
            for entity, values in changes.items():
                if values:
                    self.entities[entity] = values
                else:
                    self.entities.pop(entity, None)
            self.version += 1
        return list(results.values())

    @staticmethod
    def _check_entity(entity: Mapping[str, str | None], resolvable: Mapping[str, bool]) -> str | None:
        """Kafka's validateEntity and configKeysForEntityType."""
        if not entity:
            return "Invalid empty client quota entity"
        for etype, name in entity.items():
            if etype not in (USER, CLIENT_ID, IP):
                return f"Unhandled client quota entity type: {etype}"
            if name is not None and name == "":
                return f"Empty {etype} not supported"
        if IP in entity:
            if USER in entity or CLIENT_ID in entity:
                return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            name = entity[IP]
            if not valid_ip(name) and not resolvable.get(name or "", False):
                return f"{name} is not a valid IP or resolvable host."
        return None

    def describe(self, components: list[dict[str, Any]], strict: bool) -> list[dict[str, Any]]:
        """DescribeClientQuotas: Kafka's ClientQuotasImage.describe (raises QuotaError)."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for c in components:
            etype = c["entity_type"]
            if not etype:
                raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
            if etype in exact or etype in typed:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 f"Entity type {etype} cannot appear more than once in the filter.")
            if etype not in (IP, USER, CLIENT_ID):
                raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
            match, kind = c["match"], c["match_type"]
            if kind == MATCH_EXACT:
                if match is None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[etype] = match
            elif kind == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[etype] = None
            elif kind == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                typed.add(etype)
            else:
                raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {kind}")
        if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                             "component should not be used with user or clientId filter component.")
        entries = []
        for entity, values in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(typed):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in typed):
                continue
            entries.append({"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                            "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
        return entries
