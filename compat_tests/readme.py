"""README.md's ```sh blocks as the tests run them (compat_tests/test_readme.py runs them all
against one broker, tests/test_readme_container.py the first command and example on a machine
with only python3), and the copy of the checkout they run in.

HTML comments just before a block tell the tests how to run it (a reader never sees them):
* `<!-- readme-test: background -->` — a long-running server: started in the background, the
  tests wait until it answers ApiVersions and stop it (SIGTERM) at the end;
* `<!-- readme-test: skip (why) -->` — not run (the whole suite, a streaming job that runs
  until stopped, a Spark cluster, the benchmarks);
* `<!-- readme-test: expect TEXT -->` — the block's output (stdout and stderr) contains TEXT;
* `<!-- readme-test: env -->` — sets up the reader's shell (`. .venv/bin/activate`): it runs
  at the start of every later block.
Every other block must exit 0.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"((?:<!-- readme-test: [^\n]*-->\n)*)```sh\n(.*?)```\n", re.S)
MARKER = re.compile(r"<!-- readme-test: (\w+) ?(.*?) ?-->")


@dataclass
class Block:
    line: int
    text: str
    skip: bool = False
    background: bool = False
    env: bool = False
    expect: list[str] = field(default_factory=list)


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    for m in BLOCK.finditer(text):
        block = Block(text.count("\n", 0, m.start(2)) + 1, m.group(2))
        for kind, arg in MARKER.findall(m.group(1)):
            if kind == "skip":
                block.skip = True
            elif kind == "background":
                block.background = True
            elif kind == "env":
                block.env = True
            elif kind == "expect":
                block.expect.append(arg)
            else:
                raise AssertionError(f"README line {block.line}: unknown readme-test marker {kind!r}")
        blocks.append(block)
    return blocks


def copy_checkout(dest: Path) -> None:
    """The repository's tracked files as they are now in the work tree, as a fresh clone of
    this commit plus its uncommitted edits would have them (nothing untracked or ignored)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
