"""Packaging and import hygiene: what `pip install .` puts in site-packages, no imports of the
old top-level names, and no run-time dependency on kafka-python."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = PYPROJECT["project"]["version"]
#: The folders behind tmqgate.protocol, tmqgate.storage, ... (pyproject's package-dir).
PACKAGE_DIRS = PYPROJECT["tool"]["setuptools"]["package-dir"]
OLD_TOP_LEVEL = {name.split(".")[1] for name in PACKAGE_DIRS}

#: Run-time modules that still import kafka-python (a test-only dependency now).
#: TODO(issue 10, at merge): broker/tsdb/catalog.py imports murmur2 from tmqgate.protocol.partitioner
#: instead of kafka.partitioner.default; then this set is empty.


def _git_files(*patterns: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Absolute imports of a file: (line, dotted module name)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_imports_of_the_old_top_level_names():
    """`import protocol` (or storage, broker, ...) would load a second copy of a module next to
    tmqgate.protocol's, with its own globals: everything must go through tmqgate.*."""
    bad = [f"{rel}:{line}: {mod}"
           for rel in _git_files("*.py")
           for line, mod in _imported_modules(ROOT / rel)
           if mod.split(".")[0] in OLD_TOP_LEVEL]
    assert not bad, "imports of the bare old package names:\n" + "\n".join(bad)


def test_runtime_packages_do_not_import_kafka_python():
    folders = tuple(f"{folder}/" for folder in PACKAGE_DIRS.values())
    found = {rel: [f"{line}: {mod}" for line, mod in _imported_modules(ROOT / rel) if mod.split(".")[0] == "kafka"]
             for rel in _git_files("*.py") if rel.startswith(folders)}
    found = {rel: hits for rel, hits in found.items() if hits}
    assert not found, f"run-time imports of kafka-python: {found}"


def test_protocol_imports_without_kafka_python():
    """Every tmqgate.protocol module loads (and SCHEMAS builds) with `kafka` unimportable."""
    modules = sorted(p.stem for p in (ROOT / PACKAGE_DIRS["tmqgate.protocol"]).glob("*.py")
                     if p.stem != "__init__")
    code = ("import sys; sys.modules['kafka'] = None\n"
            + "".join(f"import tmqgate.protocol.{m}\n" for m in modules)
            + "from tmqgate.protocol.schemas import SCHEMAS\n"
            + "assert len(SCHEMAS) > 20 and 'kafka' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def _site_packages(env_dir: Path) -> Path:
    found = list(env_dir.glob("lib/python*/site-packages")) + list(env_dir.glob("Lib/site-packages"))
    assert len(found) == 1, found
    return found[0]


def _env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pip_install_puts_only_tmqgate_in_site_packages(tmp_path: Path):
    """A non-editable `pip install .` into an empty venv: only tmqgate/ (a namespace package,
    no __init__.py) and its dist-info at the top level, the schema resources installed, and the
    console script.  Builds from a copy of the tracked files, so nothing untracked helps and the
    work tree gets no build/ or egg-info.  pip's build isolation fetches setuptools and wheel
    from the package index (or its cache)."""
    src = tmp_path / "src"
    for rel in _git_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    site = _site_packages(env_dir)
    before = {p.name for p in site.iterdir()}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    res = subprocess.run(
        [str(_env_python(env_dir)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--progress-bar=off", str(src)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, res.stdout + res.stderr

    added = {p.name for p in site.iterdir()} - before - {"__pycache__"}
    assert added == {"tmqgate", f"tmqgate-{VERSION}.dist-info"}, sorted(added)

    pkg = site / "tmqgate"
    assert not (pkg / "__init__.py").exists(), "tmqgate must stay a namespace package"
    assert {p.name for p in pkg.iterdir()} - {"__pycache__"} == {n.split(".")[1] for n in PACKAGE_DIRS}
    repo_schemas = {p.name for p in (ROOT / "protocol" / "resources").glob("*.json")}
    installed = {p.name for p in (pkg / "protocol" / "resources").glob("*.json")}
    assert installed == repo_schemas and len(installed) > 50
    assert (pkg / "protocol" / "resources" / "VERSION").is_file()

    entry_points = (site / f"tmqgate-{VERSION}.dist-info" / "entry_points.txt").read_text()
    assert "[console_scripts]" in entry_points
    assert "tmqgate = tmqgate.broker.cli:main" in entry_points
    assert (_env_python(env_dir).parent / ("tmqgate.exe" if os.name == "nt" else "tmqgate")).exists()

    # The installed copy loads its own schemas (schemas.py needs only the standard library).
    check = ("import sys; sys.modules['kafka'] = None\n"
             "import tmqgate.protocol.schemas as s\n"
             f"assert s.__file__.startswith({str(site)!r}), s.__file__\n"
             "assert len(s.SCHEMAS) > 20, len(s.SCHEMAS)\n")
    res = subprocess.run([str(_env_python(env_dir)), "-c", check], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
