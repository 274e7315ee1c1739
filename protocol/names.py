"""Apache Kafka's topic name rule (`org.apache.kafka.common.internals.Topic.validate`).

A topic name is 1 to 249 characters of ASCII letters, digits, '.', '_' and '-', and is
neither "." nor "..". Pure: the broker's CreateTopics and the TDengine name rules
(`broker/tsdb/names.py`, for databases and topics, which are Kafka topics too) both ask here.
"""

from __future__ import annotations

import re

__all__ = ["MAX_TOPIC_NAME_LENGTH", "topic_name_problem"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_problem(name: str | None) -> str | None:
    """Why `name` is not a legal Kafka topic name (Kafka's wording), or None if it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                f"topic name: {name}")
    if not _LEGAL.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None
