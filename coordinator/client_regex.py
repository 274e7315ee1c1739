"""Regular expressions that come from clients, on RE2 — the one way to compile them.

ListTransactions v2's ``transactional_id_pattern`` (KIP-1152) and KIP-848's
``subscribed_topic_regex`` are Kafka's RE2/J patterns, matched whole (``Matcher.matches``).
Python's backtracking ``re`` took seconds on one match of ``(.*.*)*X`` (×4 per character) on
the event loop; RE2 matches in time linear in the text, and its syntax is RE2/J's: no
backreferences or lookaround — refused as invalid, as Kafka refuses them
(INVALID_REGULAR_EXPRESSION).

A pattern is also refused when it is longer than ``MAX_PATTERN_CHARS`` (checked before RE2
parses it: a megabytes-long pattern costs seconds to parse and makes RE2 log to stderr) or
when its compiled program needs more than ``MAX_PROGRAM_BYTES`` (RE2's ``max_mem``), so that
one match costs at most about a nanosecond per program instruction per character, whatever
the pattern. Kafka has neither limit (RE2/J has no memory bound); real patterns are far below.
"""

from __future__ import annotations

from typing import Any

import re2

#: Longest pattern accepted (characters).
MAX_PATTERN_CHARS = 16_384
#: RE2's max_mem: the compiled program and its DFA cache (~10k instructions at most).
MAX_PROGRAM_BYTES = 256 << 10

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_PROGRAM_BYTES
_OPTIONS.log_errors = False  # a client's bad pattern is answered, not logged by RE2 on stderr


class InvalidRegex(ValueError):
    """The pattern is not an RE2 pattern, or is over the limits; the message says why."""


class ClientRegex:
    """A compiled client pattern; ``fullmatch`` is Kafka's ``Matcher.matches``."""

    __slots__ = ("pattern", "_regex")

    def __init__(self, pattern: str, regex: Any) -> None:
        self.pattern = pattern
        self._regex = regex

    def fullmatch(self, text: str) -> bool:
        return self._regex.fullmatch(text) is not None


def compile_client_regex(pattern: str) -> ClientRegex:
    """The pattern compiled on RE2; raises InvalidRegex."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRegex(f"pattern too long: {len(pattern)} characters, at most {MAX_PATTERN_CHARS}")
    try:
        return ClientRegex(pattern, re2.compile(pattern, _OPTIONS))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise InvalidRegex(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
