"""franz-go (kgo, kadm; Go) driven by a small program: `compat_tests/go/main.go`, built once by
`scripts/install_go_client.sh` into `compat_tests/go/bin/` (see the program's header for its
modes and the JSON lines it prints)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .helpers import require

GO_DIR = Path(__file__).resolve().parent / "go"
INSTALL = "scripts/install_go_client.sh"


def program() -> Path:
    """The built program for the sources as they are (the installer's hash), or
    missing_dependency naming the installer."""
    __tracebackhide__ = True
    digest = hashlib.sha256(b"".join((GO_DIR / name).read_bytes() for name in ("main.go", "go.mod", "go.sum")))
    path = GO_DIR / "bin" / f"gokafka-{digest.hexdigest()[:16]}"
    require(path.is_file(), f"the franz-go test program is not built for these sources ({path.name})", INSTALL)
    return path


@dataclass(frozen=True)
class GoRun:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str  # kgo's log (info)

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def report(self) -> str:
        """What to show when an assertion fails: the errors and the tail of kgo's log."""
        return f"exit {self.returncode}; errors {self.of('error')}; kgo's log:\n{self.stderr[-6000:]}"


def run_go(mode: str, bootstrap: str, timeout: float = 120.0, **flags: str | int | bool) -> GoRun:
    """`gokafka MODE -brokers BOOTSTRAP -flag value...` (a True flag is given bare, False left out)."""
    args = [str(program()), mode, "-brokers", bootstrap, "-log", "info"]
    for name, value in flags.items():
        if value is True:
            args.append(f"-{name}")
        elif value is not False:
            args += [f"-{name}", str(value)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return GoRun(proc.returncode, events, proc.stderr)
