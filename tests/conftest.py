"""Unit-test fixtures shared by every file of tests/."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

# The brokers the tests start are single brokers unless a test asks for workers (`--workers N`,
# `--target tmqgate-workers`): `tmqgate serve`'s default, one worker per core, is what the README
# test (compat_tests/test_readme.py) and tests/test_workers_config.py run.
os.environ.setdefault("TMQGATE_WORKERS", "1")


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
