"""The README's first command and first example, exactly as written, on a fresh Debian machine
that has only python3 (issue 24): no pip, no python3-venv, nothing installed by hand.

The machine is a container of tmqgate-local/python3:bookworm (scripts/install_docker.sh makes it
from Debian's archive) holding a copy of the checkout. Containers here reach no package index,
so the wheels the command installs are mounted and named by PIP_FIND_LINKS with PIP_NO_INDEX
(pip's own settings, what a mirror would give; the README's text is not changed): tmqgate's
dependencies, its build requirements, kafka-python and pip's wheel, which scripts/bootstrap.py
installs into .venv where Debian's python3 has no ensurepip. The container has a network of its
own, so the README's 127.0.0.1:9092 and :6041 are used as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.containers import TEST_LABEL, require_docker
from compat_tests.helpers import wait_until
from compat_tests.readme import ROOT, copy_checkout, readme_blocks

pytestmark = pytest.mark.container

PYTHON3_ONLY = "tmqgate-local/python3:bookworm"


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A fresh python3-only machine with the checkout at /repo, running the README's first command."""
    require_docker()
    import tomllib

    import docker

    from compat_tests.images import wheelhouse

    client = docker.from_env()
    try:
        client.images.get(PYTHON3_ONLY)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{PYTHON3_ONLY} is missing: scripts/install_docker.sh makes it")
    clients = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["clients"]
    wheels = wheelhouse(("pip", *clients))
    repo = tmp_path / "repo"
    copy_checkout(repo)
    first = readme_blocks((repo / "README.md").read_text())[0]
    assert first.background, "the README's first block starts the broker"
    container = client.containers.run(
        PYTHON3_ONLY, ["bash", "-c", first.text], detach=True, working_dir="/repo",
        volumes={str(repo): {"bind": "/repo", "mode": "rw"}, str(wheels): {"bind": "/wheels", "mode": "ro"}},
        environment={"PIP_FIND_LINKS": "/wheels", "PIP_NO_INDEX": "1"}, labels={TEST_LABEL: "test_readme_container"})
    try:
        yield container, repo
    finally:
        container.remove(force=True)


def test_the_readmes_first_command_and_example_on_a_machine_with_only_python3(machine: tuple[Any, Path]) -> None:
    container, repo = machine

    def log() -> str:
        return container.logs().decode(errors="replace")

    # Nothing of what the command needs is there beforehand.
    for probe in ("python3 -m pip --version", "python3 -c 'import ensurepip'", "python3 -c 'import kafka'"):
        assert container.exec_run(["bash", "-c", probe]).exit_code != 0, probe

    def ready() -> bool:
        container.reload()
        assert container.status == "running", f"the first command ended:\n{log()}"
        return "tmqgate ready: kafka PLAINTEXT://127.0.0.1:9092, http 127.0.0.1:6041" in log()

    wait_until(ready, 600, interval=1, what=lambda: f"the README's first command:\n{log()}")
    assert "installing pip from its wheel" in log()  # Debian's python3: no ensurepip

    blocks = readme_blocks((repo / "README.md").read_text())
    env = next(b for b in blocks if b.env)
    example = next(b for b in blocks[1:] if not (b.skip or b.env))
    assert example.expect == ["[(0, b'k', b'hello')]"]
    done = container.exec_run(["bash", "-euo", "pipefail", "-c", env.text + example.text], workdir="/repo")
    out = done.output.decode(errors="replace")
    assert done.exit_code == 0, f"{out}\n--- broker ---\n{log()}"
    assert example.expect[0] in out, out
    assert (repo / "data").is_dir() and (repo / ".venv" / "bin" / "tmqgate").exists()
