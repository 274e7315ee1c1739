"""compat_tests/helpers.missing_dependency: a test that needs something not installed here is
skipped with one line naming the command that installs it — and fails under CI (TMQGATE_CI,
or CI, set to 1 / true), where a missing install must never pass as a skip.

Run as a subprocess pytest over a tiny test file, the way CI and a developer run the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TINY = '''
from compat_tests.helpers import missing_dependency, require, require_module


def test_needs_the_frobnicator():
    missing_dependency("frobnicator not installed", "scripts/install_frob.sh")


def test_needs_a_module():
    require_module("no_such_module_tmqgate")


def test_has_what_it_needs():
    require("/bin/sh", "sh not installed", "apt-get install dash")
    assert require_module("json").dumps(1) == "1"
'''


def _run(tmp_path: Path, **env: str) -> str:
    (tmp_path / "test_tiny.py").write_text(TINY)
    clean = {k: v for k, v in os.environ.items() if k not in ("TMQGATE_CI", "CI")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
                           "test_tiny.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "300", **env})
    return done.stdout + done.stderr


@pytest.mark.parametrize("env", [{}, {"TMQGATE_CI": "0"}, {"CI": "false"}], ids=str)
def test_outside_ci_a_missing_dependency_skips_naming_its_install(tmp_path: Path, env: dict[str, str]) -> None:
    out = _run(tmp_path, **env)
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped == [  # one line each, at the test's own line
        "SKIPPED [1] test_tiny.py:6: frobnicator not installed; run scripts/install_frob.sh",
        "SKIPPED [1] test_tiny.py:10: Python module no_such_module_tmqgate not installed; "
        "run pip install -e '.[test]'"], out
    assert re.search(r"^1 passed, 2 skipped", out, re.M), out
    assert "FAILED" not in out


@pytest.mark.parametrize("env", [{"TMQGATE_CI": "1"}, {"CI": "1"}, {"CI": "true"}], ids=str)
def test_under_ci_a_missing_dependency_fails(tmp_path: Path, env: dict[str, str]) -> None:
    out = _run(tmp_path, **env)
    failed = sorted(line for line in out.splitlines() if line.startswith("FAILED"))
    assert failed == [
        "FAILED test_tiny.py::test_needs_a_module - Failed: Python module no_such_module_tmqgate not "
        "installed; run pip install -e '.[test]' (under CI a missing dependency fails the test)",
        "FAILED test_tiny.py::test_needs_the_frobnicator - Failed: frobnicator not installed; "
        "run scripts/install_frob.sh (under CI a missing dependency fails the test)"], out
    assert re.search(r"^2 failed, 1 passed", out, re.M), out
    assert "SKIPPED" not in out and " skipped" not in out
