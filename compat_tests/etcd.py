"""A real etcd for the cluster tests (issue 16): Debian's etcd-server (scripts/install_etcd.sh),
started on loopback with free ports and its own data directory, stopped at the end."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

from .helpers import free_port, require, wait_until


def require_etcd() -> None:
    """etcd on PATH, or the test is skipped — failed under CI (helpers.missing_dependency)."""
    __tracebackhide__ = True
    require(shutil.which("etcd"), "etcd not installed", "scripts/install_etcd.sh")


class EtcdProcess:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """What `tmqgate serve --cluster` takes."""
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        binary = shutil.which("etcd")
        assert binary, "etcd not installed (scripts/install_etcd.sh)"
        self.workdir.mkdir(parents=True, exist_ok=True)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = (self.workdir / "etcd.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, "--name", "t", "--data-dir", str(self.workdir / "data"), "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"t={peer}", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:
                    if b'"true"' in resp.read():
                        return True
            except OSError:
                pass
            assert proc.poll() is None, (self.workdir / "etcd.log").read_text()[-2000:]
            return False

        wait_until(healthy, 30, 0.1, "etcd to become healthy")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
