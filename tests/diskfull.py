"""A small filesystem for disk-full tests: a tmpfs mounted under a temporary directory and
unmounted after (the tests skip where mounting is not permitted, and fail so under CI:
compat_tests/helpers.missing_dependency)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def small_fs(size_mb: int) -> Iterator[str]:
    """A fresh tmpfs of ``size_mb`` MiB; skips the test if it cannot be mounted (fails it
    under CI)."""
    from compat_tests.helpers import missing_dependency, require

    require(hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount"),
            "mounting a small filesystem needs root and mount(8)", "the tests as root")
    where = tempfile.mkdtemp(prefix="tmqgate-full-")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", where],
                          capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(where)
        missing_dependency(f"cannot mount a tmpfs here ({done.stderr.strip()})",
                           "the tests as root where mounting is permitted (CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", where], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(where)


def fill(path: str, name: str = "filler") -> str:
    """Take every free byte of ``path``'s filesystem with one file; returns its path."""
    target = os.path.join(path, name)
    chunk = b"\xff" * (64 << 10)
    with open(target, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
        try:
            while True:
                fh.write(b"\xff" * 512)
        except OSError:
            pass
    return target


def free_bytes(path: str) -> int:
    return shutil.disk_usage(path).free
