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

from compat_tests.helpers import require

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
    require(shutil.which("git") and (ROOT / ".git").exists(), "the packaging tests read a git checkout's files",
            "git clone")
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


def _product_modules() -> set[str]:
    """What a wheel must hold, from the checkout: every tracked file under the package folders
    that is a module or a package resource, named as it is installed (tmqgate/broker/cli.py)."""
    out = set()
    for name, folder in PACKAGE_DIRS.items():
        for rel in _git_files(f"{folder}/"):
            if rel.endswith(".py") or rel.startswith(f"{folder}/resources/"):
                out.add(name.replace(".", "/") + rel[len(folder):])
    return out


def _installed_files(pkg: Path) -> set[str]:
    return {str(p.relative_to(pkg.parent)) for p in pkg.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_installs_every_module_and_its_broker_serves(tmp_path: Path):
    """The wheel, as a user or deploy/Dockerfile installs it: built from a copy of the tracked
    files (nothing untracked helps, the work tree gets no build/), installed with its
    dependencies into an empty venv. It holds exactly the checkout's modules and resources
    (a subpackage missing from it is a broker that cannot start), only tmqgate/ and its
    dist-info land at the top of site-packages, and the installed `tmqgate serve` round-trips a
    record with a Kafka client. pip takes the dependencies from its cache or the index."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from compat_tests.helpers import api_versions_ok, free_port, wait_until
    from compat_tests.readme import copy_checkout

    src = tmp_path / "src"
    copy_checkout(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    wheels = tmp_path / "wheels"
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels),
                          str(src)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = wheels.glob("tmqgate-*.whl")
    assert wheel.name == f"tmqgate-{VERSION}-py3-none-any.whl"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    site = _site_packages(env_dir)
    before = {p.name for p in site.iterdir()}
    res = subprocess.run([str(_env_python(env_dir)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--progress-bar=off", str(wheel)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=280)
    assert res.returncode == 0, res.stdout + res.stderr

    pkg = site / "tmqgate"
    assert not (pkg / "__init__.py").exists(), "tmqgate must stay a namespace package"
    assert _installed_files(pkg) == _product_modules()
    assert len(list((pkg / "protocol" / "resources").glob("*.json"))) > 50
    added = {p.name for p in site.iterdir()} - before
    assert {"tmqgate", f"tmqgate-{VERSION}.dist-info"} <= added
    assert not {p for p in added if p.split("-")[0].split(".")[0] in OLD_TOP_LEVEL}, sorted(added)
    entry_points = (site / f"tmqgate-{VERSION}.dist-info" / "entry_points.txt").read_text()
    assert "tmqgate = tmqgate.broker.cli:main" in entry_points

    tmqgate = _env_python(env_dir).parent / ("tmqgate.exe" if os.name == "nt" else "tmqgate")
    kafka, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = tmp_path / "broker.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(tmqgate), "serve", "--listen", kafka, "--http", http,
                                   "--data-dir", str(tmp_path / "data")], cwd=tmp_path, env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: api_versions_ok(kafka) or server.poll() is not None, 60, what="the installed broker")
        assert server.poll() is None, log.read_text()
        producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
        meta = producer.send("wheel-check", key=b"k", value=b"from the wheel").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=kafka, consumer_timeout_ms=3000)
        consumer.assign([TopicPartition("wheel-check", meta.partition)])
        consumer.seek_to_beginning()
        got = [(m.offset, m.key, m.value) for m in consumer]
        consumer.close()
        assert got == [(0, b"k", b"from the wheel")]
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0, log.read_text()
    text = log.read_text()
    assert f"tmqgate ready: kafka PLAINTEXT://{kafka}" in text, text
