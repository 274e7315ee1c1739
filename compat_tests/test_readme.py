"""The README reads straight through (issue 13): every ```sh block of README.md runs, in order,
in a fresh copy of the repository, against the one broker its first block starts (the markers
that tell how to run a block: compat_tests/readme.py). So that it runs anywhere, the test gives
the broker free ports (the README's 127.0.0.1:9092 and :6041 are rewritten), and leaves out
`scripts/bootstrap.py`: the copy's `.venv` is the test's own virtual environment, which has
everything installed (tests/test_readme_container.py runs the first command and example as
written, on a machine with only python3); `scripts/install_java.sh` runs as written (the copy
links the installed jars, so it finds them up to date).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .cli_helpers import require_tools
from .helpers import api_versions_ok, free_port, require, require_module, wait_until
from .readme import ROOT, copy_checkout, readme_blocks

SETUP = re.compile(r"python3 scripts/bootstrap\.py[^&\n]*&& ")
BLOCK_TIMEOUT = 300.0


def localize(text: str, kafka: str, http: str) -> str:
    text = SETUP.sub("", text)
    text = text.replace("127.0.0.1:9092", kafka).replace("127.0.0.1:6041", http)
    text = re.sub(r"\btmqgate serve\b", f"tmqgate serve --listen {kafka} --http {http}", text)
    return re.sub(r"\btmqgate sql ", f"tmqgate sql --http {http} ", text)


def fresh_copy(dest: Path) -> None:
    """The repository's tracked files (README.md as it is now), links to the installed jars, and
    `.venv` the test's own virtual environment (what the README's first command makes)."""
    copy_checkout(dest)
    for lib in ("compat_tests/java/lib", "compat_tests/java/spark-lib"):
        if (ROOT / lib).is_dir():
            shutil.rmtree(dest / lib, ignore_errors=True)
            (dest / lib).symlink_to(ROOT / lib)
    (dest / ".venv").symlink_to(sys.prefix)


def test_readme_blocks_parse() -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert sum(b.background for b in blocks) == 1, "one block starts the broker"
    assert blocks[0].background, "the README's first command starts the broker"
    assert blocks[0].text == "python3 scripts/bootstrap.py && .venv/bin/tmqgate serve\n"
    assert blocks[1].skip and blocks[1].text == "scripts/test.sh\n", "the second command runs the test suite"
    assert [b.text for b in blocks if b.env] == [". .venv/bin/activate\n"]
    assert not any(re.search(r"\btmqgate serve\b", b.text) for b in blocks[1:] if not b.skip), \
        "no later block starts a second broker"


@pytest.mark.tmqgate_only
def test_every_readme_block_runs_in_order(tmp_path: Path) -> None:
    require_tools()
    require_module("pyspark")
    require(sys.prefix != sys.base_prefix, "the README's commands run in .venv: the suite must run in a "
            "virtual environment", "scripts/test.sh (it makes .venv)")
    work = tmp_path / "repo"
    work.mkdir()
    fresh_copy(work)
    # `tmqgate serve` as the README gives it: one worker per core (worker i on each port + i)
    from tmqgate.broker.workers import cores

    workers = cores()
    port = free_port(workers)
    kafka, http = f"127.0.0.1:{port}", f"127.0.0.1:{free_port(workers)}"
    env = {k: v for k, v in os.environ.items() if k != "TMQGATE_WORKERS"}
    server: subprocess.Popen[bytes] | None = None
    server_log = tmp_path / "broker.log"
    setup = ""
    try:
        for block in readme_blocks((work / "README.md").read_text()):
            if block.skip:
                continue
            if block.env:
                setup += block.text
                continue
            script = setup + localize(block.text, kafka, http)
            if block.background:
                with server_log.open("wb") as log:
                    server = subprocess.Popen(["bash", "-c", f"exec {script.strip()}"], cwd=work, env=env,
                                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                wait_until(lambda: all(api_versions_ok(f"127.0.0.1:{port + i}") for i in range(workers)), 60,
                           what=f"the {workers} workers of README line {block.line}")
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
            out = done.stdout + done.stderr
            where = f"README line {block.line}:\n{script}\n--- exit {done.returncode}, output ---\n{out}"
            assert done.returncode == 0, where
            for text in block.expect:
                assert text in out, f"expected {text!r}\n{where}"
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    # the log's end, where the stop is (the whole log is long, and reports cut its middle)
    assert server is not None and server.returncode == 0, \
        f"tmqgate serve exited {server and server.returncode}; its log's end:\n{server_log.read_text()[-6000:]}"
