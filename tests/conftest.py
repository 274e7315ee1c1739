"""Unit-test fixtures shared by every file of tests/."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _root_log_handlers_restored() -> Iterator[None]:
    """`tmqgate.broker.cli.main` run in-process calls logging.basicConfig with the test's
    captured stderr; left on the root logger, that handler writes to a closed file in every
    later test of the run (kafka-python's DEBUG lines included). Restore the root's handlers."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)
