"""Log levels changed at run time: the BROKER_LOGGER config resource (Kafka's KIP-412).

Why: an operator chasing a problem turns one logger up to DEBUG on a running broker with
`kafka-configs --entity-type broker-loggers --entity-name 0 --alter --add-config
tmqgate.broker.server=DEBUG`, and back, without a restart. Rules, as Apache Kafka 4.3 keeps
them (ConfigHelper's BROKER_LOGGER case, RuntimeLoggerManager, Log4jController), over
Python's `logging` in place of log4j:

- The resource name is this broker's node id (an integer): anything else is INVALID_REQUEST.
- DescribeConfigs lists "root" and every logger the process has made, each with its
  effective level (its own, else its nearest ancestor's) in Kafka's names — TRACE, DEBUG,
  INFO, WARN, ERROR, FATAL —, source DYNAMIC_BROKER_LOGGER_CONFIG (6), never read-only.
- IncrementalAlterConfigs SET gives a logger a level; DELETE takes its own level away (it
  inherits again); all checked before any is applied: an unknown logger or level is
  INVALID_CONFIG, DELETE of root, APPEND and SUBTRACT are INVALID_REQUEST. Not persisted
  (a restart goes back to the configured levels), as Kafka's.
- Legacy AlterConfigs does not know the resource type (INVALID_REQUEST), as Kafka's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from tmqgate.broker.topics import TopicError
from tmqgate.protocol.errors import ErrorCode

LOGGER_RESOURCE = 8
SOURCE_LOGGER = 6
ROOT = "root"
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

#: Kafka's level names -> Python's levels (TRACE below DEBUG, FATAL is CRITICAL).
TRACE = 5
LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_NAMES = {level: name for name, level in LEVELS.items()}
VALID_LEVELS = ", ".join(sorted(LEVELS))


def _level_name(level: int) -> str:
    """Kafka's name of a Python level (a level between two names takes the lower one)."""
    return _NAMES.get(level) or _NAMES[max((lv for lv in _NAMES if lv <= level), default=TRACE)]


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def _check_node(resource_name: str, node_id: int) -> None:
    try:
        requested = int(resource_name)
    except ValueError:
        raise TopicError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {resource_name}") from None
    if requested != node_id:
        raise TopicError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {node_id} but received {resource_name}")


def describe(resource_name: str, node_id: int, names: Iterable[str] | None) -> list[dict[str, Any]]:
    """DescribeConfigs' entries: every logger with its effective level (raises TopicError)."""
    if not resource_name:
        raise TopicError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    _check_node(resource_name, node_id)
    loggers = {ROOT: logging.getLogger()}
    for name, found in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(found, logging.Logger):
            loggers[name] = found
    wanted = set(names) if names else None
    return [{"name": name, "value": _level_name(logger.getEffectiveLevel()), "read_only": False,
             "config_source": SOURCE_LOGGER, "is_sensitive": False, "config_type": 2,
             "documentation": None, "synonyms": []}
            for name, logger in loggers.items() if wanted is None or name in wanted]


def alter(resource_name: str, node_id: int, changes: list[dict[str, Any]], validate_only: bool) -> None:
    """IncrementalAlterConfigs on the loggers: every change checked, then all applied."""
    _check_node(resource_name, node_id)
    for c in changes:
        name, op, value = c["name"], c["config_operation"], c["value"]
        if op == SET:
            if _logger(name) is None:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            if value not in LEVELS:
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"Cannot set the log level of {name} to {value} as it is not a supported log "
                                 f"level. Valid log levels are {VALID_LEVELS}")
        elif op == DELETE:
            if _logger(name) is None:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            if name == ROOT:
                raise TopicError(ErrorCode.INVALID_REQUEST,
                                 f"Removing the log level of the {ROOT} logger is not allowed")
        elif op in (APPEND, SUBTRACT):
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"{'APPEND' if op == APPEND else 'SUBTRACT'} operation is not allowed for the "
                             "BROKER_LOGGER resource")
        else:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource")
    if validate_only:
        return
    for c in changes:
        logger = _logger(c["name"])
        assert logger is not None
        if c["config_operation"] == SET:
            logger.setLevel(LEVELS[c["value"]])
            logging.getLogger(__name__).warning("Updated the log level of %s to %s", c["name"], c["value"])
        else:
            logger.setLevel(logging.NOTSET)
            logging.getLogger(__name__).warning("Unset the log level of %s", c["name"])
