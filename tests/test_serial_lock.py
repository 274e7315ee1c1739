"""compat_tests/serial.py: two pytest runs side by side never run their `serial` modules at the
same time when they share TMQGATE_TEST_LOCK, and do without it (so the lock is what keeps them
apart)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''
import time
import pytest

pytestmark = pytest.mark.{mark}


def test_{name}():
    start = time.time()
    with open({out!r}, "a") as f:
        f.write("start {name}\\n")
    if {rendezvous}:  # stay until the other run's test has started too (however loaded the machine)
        deadline = time.time() + 120
        while "start {other}" not in open({out!r}).read() and time.time() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(1.5)
    with open({out!r}, "a") as f:
        f.write(f"span {{start}} {{time.time()}}\\n")
'''


def _spans(tmp_path: Path, lock: bool, mark: str = "serial") -> list[tuple[float, float]]:
    """The two runs' test spans (start, end). Where the runs may overlap, each test waits for
    the other's to start, so that they do overlap on a loaded machine too; where the lock keeps
    them apart, each sleeps 1.5 s."""
    rendezvous = not (lock and mark == "serial")
    out = tmp_path / f"spans-{lock}-{mark}"
    env = {k: v for k, v in os.environ.items() if k != "TMQGATE_TEST_LOCK"}
    if lock:
        env["TMQGATE_TEST_LOCK"] = str(tmp_path / "serial.lock")
    env["PYTHONPATH"] = str(ROOT)
    runs = []
    for name in ("a", "b"):
        folder = tmp_path / f"{name}-{lock}-{mark}"
        folder.mkdir()
        other = "b" if name == "a" else "a"
        (folder / f"test_{name}.py").write_text(MODULE.format(mark=mark, name=name, other=other, out=str(out),
                                                              rendezvous=rendezvous))
        runs.append(subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                      "-p", "compat_tests.serial", "--rootdir", str(folder), str(folder)],
                                     cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        time.sleep(0.2)
    for run in runs:
        assert run.wait(timeout=120) == 0, run.stdout.read().decode() if run.stdout else ""
    return sorted(tuple(map(float, line.split()[1:])) for line in out.read_text().splitlines()
                  if line.startswith("span "))


def test_serial_modules_of_two_runs_do_not_overlap_under_the_lock(tmp_path: Path) -> None:
    (a_start, a_end), (b_start, b_end) = _spans(tmp_path, lock=True)
    assert b_start >= a_end


def test_without_the_lock_or_the_marker_they_overlap(tmp_path: Path) -> None:
    (a_start, a_end), (b_start, b_end) = _spans(tmp_path, lock=False)
    assert b_start < a_end
    (a_start, a_end), (b_start, b_end) = _spans(tmp_path, lock=True, mark="slow")
    assert b_start < a_end
