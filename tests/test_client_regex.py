"""coordinator/client_regex.py: client patterns on RE2 — Kafka's RE2/J syntax and whole-text
matching, refusals as INVALID_REGULAR_EXPRESSION's message, and the size limits."""

from __future__ import annotations

import pytest

from tmqgate.coordinator.client_regex import MAX_PATTERN_CHARS, InvalidRegex, compile_client_regex


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?P<x>a)(?P=x)", "(?=a).*", "(?!a).*", "(?<=a)b", "(?<!a)b",
                                     "a++", "[", "a{2}{3}", "a{1001}"])
def test_what_re2_refuses(pattern: str) -> None:
    with pytest.raises(InvalidRegex):
        compile_client_regex(pattern)


def test_fullmatch_semantics() -> None:
    r = compile_client_regex(r"logs\..*")
    assert r.fullmatch("logs.a") and not r.fullmatch("xlogs.a") and not r.fullmatch("logs")
    assert compile_client_regex("a|ab").fullmatch("ab")  # whole text, not the leftmost alternative
    assert compile_client_regex(r"\p{L}+-é").fullmatch("日本-é")
    assert not compile_client_regex(".*").fullmatch("a\nb")  # '.' is no newline, as in RE2/J


def test_catastrophic_pattern_is_linear() -> None:
    r = compile_client_regex("(.*.*)*X")
    assert not r.fullmatch("a" * 10_000) and r.fullmatch("a" * 10_000 + "X")


def test_size_limits() -> None:
    compile_client_regex("a" * MAX_PATTERN_CHARS)
    with pytest.raises(InvalidRegex, match="too long"):
        compile_client_regex("a" * (MAX_PATTERN_CHARS + 1))
    # within the length, over the program memory
    with pytest.raises(InvalidRegex, match="too large"):
        compile_client_regex("|".join(f"(?:a|b)*a(?:a|b){{{999 - i}}}c{i}" for i in range(40)))
