"""A broker process's CPU time and memory, read from /proc (Linux).

`ResourceSampler` wraps a workload: CPU seconds (utime + stime of every thread, from
/proc/PID/stat) before and after, peak resident memory sampled every 100 ms (VmRSS, and its
anonymous part RssAnon: VmRSS also counts pages of memory-mapped files, such as the SSTables
LevelDB reads through mmap, which are page cache the kernel can take back), the kernel's own
high-water mark (VmHWM, since the process started) and the 1-minute load average seen while
it ran. A process with children (`tmqgate serve --workers N`: the supervisor and its workers)
counts as the sum of them all: CPU, main threads, disk writes and each sample's memory added up.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of the process (all threads), in seconds; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime per thread (by thread id; the main thread's id is the pid)."""
    out: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def io_bytes(pid: int, key: str = "write_bytes") -> int | None:
    """A counter of /proc/PID/io: write_bytes = bytes the process caused to be written to
    storage (counted when it dirties page-cache pages, so also for data the OS flushes later)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def status_bytes(pid: int, key: str) -> int | None:
    """A `kB` line of /proc/PID/status (VmRSS, VmHWM, ...) in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class Usage:
    """What one sampled span cost the broker."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    main_thread_cpu_s: float = 0.0  # the Python thread running the event loop (tid == pid)
    disk_write_bytes: int = 0  # /proc/PID/io write_bytes over the span
    peak_rss: int = 0
    peak_anon: int = 0
    hwm: int = 0
    load_min: float = 0.0
    load_max: float = 0.0
    samples: int = 0

    def merge(self, other: Usage) -> Usage:
        return Usage(self.wall_s + other.wall_s, self.cpu_s + other.cpu_s,
                     self.main_thread_cpu_s + other.main_thread_cpu_s,
                     self.disk_write_bytes + other.disk_write_bytes,
                     max(self.peak_rss, other.peak_rss), max(self.peak_anon, other.peak_anon),
                     max(self.hwm, other.hwm),
                     min(self.load_min, other.load_min) if self.samples else other.load_min,
                     max(self.load_max, other.load_max), self.samples + other.samples)

    def to_json(self) -> dict[str, float | int]:
        return {"wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3),
                "main_thread_cpu_s": round(self.main_thread_cpu_s, 3), "disk_write_bytes": self.disk_write_bytes,
                "peak_rss_bytes": self.peak_rss, "peak_rss_anon_bytes": self.peak_anon,
                "vmhwm_bytes": self.hwm,
                "load1_min": round(self.load_min, 2), "load1_max": round(self.load_max, 2)}


@dataclass
class ResourceSampler:
    """`with ResourceSampler(pid) as s: ...` then `s.usage`."""

    pid: int
    interval: float = 0.1
    usage: Usage = field(default_factory=Usage)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _loads: list[float] = field(default_factory=list)
    _pids: list[int] = field(default_factory=list)

    def _sum(self, read: Callable[[int], float | int | None]) -> float | int | None:
        """`read` of every process, added up (None where the broker's own process is gone)."""
        values = [read(pid) for pid in self._pids]
        return None if values[0] is None else sum(v for v in values if v is not None)

    def _sample(self) -> None:
        rss = self._sum(lambda pid: status_bytes(pid, "VmRSS"))
        if rss is not None:
            self.usage.peak_rss = max(self.usage.peak_rss, int(rss))
        anon = self._sum(lambda pid: status_bytes(pid, "RssAnon"))
        if anon is not None:
            self.usage.peak_anon = max(self.usage.peak_anon, int(anon))
        self._loads.append(os.getloadavg()[0])
        self.usage.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _main_threads(self) -> float | None:
        return self._sum(lambda pid: thread_cpu_seconds(pid).get(pid))

    def __enter__(self) -> ResourceSampler:
        from compat_tests.helpers import child_pids

        self._pids = [self.pid, *child_pids(self.pid)]
        self._cpu0 = self._sum(cpu_seconds) or 0.0
        self._main0 = self._main_threads() or 0.0
        self._wb0 = self._sum(io_bytes) or 0
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.usage.wall_s = time.perf_counter() - self._t0
        cpu1 = self._sum(cpu_seconds)
        self.usage.cpu_s = (cpu1 - self._cpu0) if cpu1 is not None else 0.0
        main1 = self._main_threads()
        self.usage.main_thread_cpu_s = (main1 - self._main0) if main1 is not None else 0.0
        wb1 = self._sum(io_bytes)
        self.usage.disk_write_bytes = int(wb1 - self._wb0) if wb1 is not None else 0
        self.usage.hwm = int(self._sum(lambda pid: status_bytes(pid, "VmHWM")) or 0)
        self.usage.load_min = min(self._loads)
        self.usage.load_max = max(self._loads)


def uptime() -> str:
    """`uptime`'s line (the machine's load, for a benchmark's report); the load averages alone
    where the command is missing."""
    import subprocess

    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
