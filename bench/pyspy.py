"""Sampling the broker with py-spy while a workload runs, and the top of the profile.

`PySpy(pid, out)` starts `py-spy record --format raw --function` against a running process
(collapsed stacks, one `frame;frame;... count` line each, samples aggregated by function)
and stops it with SIGINT, which makes py-spy write its file.  `top_entries` reads such a
file: own time counts a sample against the innermost frame only, total time against every
function on the stack.  Idle threads (the event loop waiting in epoll) are not sampled, so
the percentages are of the time the broker was busy.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


def available() -> bool:
    return shutil.which("py-spy") is not None


# the event loop in epoll_wait: py-spy does not always see it as idle
WAITING = "EpollSelector.select ("


@dataclass
class Entry:
    frame: str
    samples: int
    share: float  # of all samples
    busy_share: float  # of the samples not waiting in epoll


class PySpy:
    """`with PySpy(pid, path): workload()` — raw collapsed stacks in `path`."""

    def __init__(self, pid: int, path: Path, rate: int = 100) -> None:
        self.pid = pid
        self.path = path
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = path.with_suffix(".log")

    def __enter__(self) -> PySpy:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cmd = ["py-spy", "record", "--pid", str(self.pid), "--format", "raw", "--function",
               "--rate", str(self.rate), "--output", str(self.path)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(1.0)  # attach before the workload starts
        if self.proc.poll() is not None:
            raise RuntimeError(f"py-spy exited with {self.proc.returncode}: {self.log.read_text()}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def read_stacks(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks.append((stack.split(";"), int(count)))
    return stacks


# tmqgate's own packages: the total-time table lists only these (the asyncio frames above
# them are on every stack and say nothing)
PROJECT = ("(broker/", "(storage/", "(protocol/", "(coordinator/")


def top_entries(path: Path, n: int = 15) -> tuple[int, list[Entry], list[Entry]]:
    """(total samples, top `n` by own time, top `n` of tmqgate's functions by total time)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    total_busy: Counter[str] = Counter()  # the same, over stacks not waiting in epoll
    samples = 0
    for frames, count in read_stacks(path):
        samples += count
        own[frames[-1]] += count
        waiting = frames[-1].startswith(WAITING)
        for frame in set(frames):
            if any(p in frame for p in PROJECT):
                total[frame] += count
                if not waiting:
                    total_busy[frame] += count
    busy = samples - sum(k for f, k in own.items() if f.startswith(WAITING))
    own_busy = Counter({f: k for f, k in own.items() if not f.startswith(WAITING)})

    def entries(c: Counter[str], c_busy: Counter[str]) -> list[Entry]:
        return [Entry(f, k, k / samples if samples else 0.0, c_busy[f] / busy if busy else 0.0)
                for f, k in c.most_common(n)]
    return samples, entries(own, own_busy), entries(total, total_busy)
