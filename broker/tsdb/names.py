"""The one rule for every name the TDengine side makes: SQL's CREATE DATABASE / STABLE / TABLE /
TOPIC, ALTER STABLE ADD COLUMN/TAG, INSERT ... USING's auto-created child tables, and the
schemaless writers' auto-created supertables, child tables, columns and tags.

TDengine's naming rules (docs: "Naming Conventions and Limitations"):

* an unquoted name is ASCII letters, digits and '_', not starting with a digit (and is
  case-insensitive: the parser lower-cases it before it gets here);
* a `backquoted` name keeps its case and may hold other characters, but never '.'
  (TDengine: "The table name cannot contain '.'"); we also refuse what is not printable
  (NUL, control and format characters, lone surrogates) and the backquote itself, which no
  TDengine client can quote;
* lengths are counted in UTF-8 bytes: database 64, table 192, column 64, tag 64, topic 192.

What is also a Kafka topic — a database (each is the topic of its rows) and a TDengine topic —
must besides be a legal Kafka topic name (`protocol.names`: 1..249 of [a-zA-Z0-9._-], not
"." or ".."), so clients can name it. Schemaless writers turn '.' into '_' before asking.

Refusals say "Invalid identifier name: ..." with TDengine's code for it,
TSDB_CODE_PAR_INVALID_IDENTIFIER_NAME (0x2617).
"""

from __future__ import annotations

import re
from typing import Literal

from tmqgate.protocol.names import topic_name_problem

__all__ = ["INVALID_IDENTIFIER", "MAX_LENGTH", "Kind", "InvalidName", "name_problem", "check_name"]

INVALID_IDENTIFIER = 0x2617

Kind = Literal["database", "table", "column", "tag", "topic"]

MAX_LENGTH: dict[str, int] = {"database": 64, "table": 192, "column": 64, "tag": 64, "topic": 192}

_UNQUOTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KAFKA_KINDS = ("database", "topic")


class InvalidName(ValueError):
    """A name TDengine (or Kafka, for a database or topic) would refuse; str() says why."""


def name_problem(name: str, kind: Kind, quoted: bool = True) -> str | None:
    """Why `name` cannot name a new `kind`, or None if it can. `quoted`: it was written in
    backquotes (or comes from data, as schemaless names do), so TDengine's escaped-name rules apply."""
    what = f"{kind} name"
    if not name:
        return f"Invalid identifier name: empty {what}"
    shown = name if len(name) <= 80 else name[:80] + "..."
    if not quoted and not _UNQUOTED.fullmatch(name):
        return (f"Invalid identifier name: {shown!r}: an unquoted {what} is ASCII letters, digits and '_', "
                "not starting with a digit (write other names in `backquotes`)")
    if not name.isprintable() or "`" in name:
        return f"Invalid identifier name: {shown!r}: a {what} cannot hold control characters or '`'"
    limit = MAX_LENGTH[kind]
    size = len(name) if name.isascii() else len(name.encode("utf-8", "surrogatepass"))
    if size > limit:
        return f"Invalid identifier name: {shown!r}: {what} too long (at most {limit} bytes, this one is {size})"
    if kind in _KAFKA_KINDS:
        problem = topic_name_problem(name)
        if problem is not None:
            return f"Invalid identifier name: a {what} is also a Kafka topic name: {problem}"
    if "." in name and kind != "topic":
        return f"Invalid identifier name: {shown!r}: a {what} cannot contain '.'"
    return None


def check_name(name: str, kind: Kind, quoted: bool = True) -> str:
    """`name` if it can name a new `kind`; InvalidName otherwise (see `name_problem`)."""
    problem = name_problem(name, kind, quoted)
    if problem is not None:
        raise InvalidName(problem)
    return name
