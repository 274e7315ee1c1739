"""Make the project's virtual environment, .venv, with tmqgate installed in it (editable) and
the extras asked for (default: clients, the Kafka client the README's examples use).

The README's first command. It needs nothing but python3 (3.11 or newer): a system Python
that refuses `pip install` (PEP 668's externally managed environment, as on Debian and
Ubuntu) is never touched, and where the venv module cannot install pip (Debian and Ubuntu
ship ensurepip in a separate package, python3-venv), pip is installed into the new
environment from its wheel: one in a PIP_FIND_LINKS folder, else the newest from the package
index (PIP_INDEX_URL, default PyPI), checked against the index's sha256.

    python3 scripts/bootstrap.py                  # .venv with tmqgate[clients]
    python3 scripts/bootstrap.py --extra test     # what scripts/test.sh needs

Run again, it installs only when pyproject.toml, setup.py or the extras changed. Standard
library only, and no tomllib, so that an older python3 gets one line saying what it needs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".tmqgate-bootstrap"


def fail(message: str) -> None:
    print(f"bootstrap: {message}", file=sys.stderr)
    sys.exit(2)


def log(message: str) -> None:
    print(f"bootstrap: {message}", file=sys.stderr, flush=True)


def env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def has_pip(python: Path) -> bool:
    return subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0


def create(env_dir: Path) -> None:
    """A new venv; pip by ensurepip where the interpreter has it, else from pip's wheel."""
    log(f"making the virtual environment {env_dir}")
    venv.EnvBuilder(with_pip=False, upgrade_deps=False).create(env_dir)
    python = env_python(env_dir)
    if subprocess.run([str(python), "-m", "ensurepip", "--upgrade", "--default-pip"],
                      capture_output=True).returncode == 0 and has_pip(python):
        return
    log("this python3 has no ensurepip (Debian/Ubuntu without python3-venv): installing pip from its wheel")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = pip_wheel(Path(tmp))
        # A wheel of pip runs as a zip: pip installs itself from it.
        done = subprocess.run([str(python), f"{wheel}/pip", "install", "--quiet", "--no-index", str(wheel)])
    if done.returncode != 0 or not has_pip(python):
        fail(f"could not install pip into {env_dir} from {wheel.name}")


def pip_wheel(tmp: Path) -> Path:
    """pip's wheel: from a PIP_FIND_LINKS folder if one holds it, else downloaded from the index."""
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        found = sorted(Path(folder).glob("pip-*-py3-none-any.whl")) if Path(folder).is_dir() else []
        if found:
            return found[-1]
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/pip/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            files = json.load(answer)["files"]
        wheels = [f for f in files if f["filename"].endswith("-py3-none-any.whl") and not f.get("yanked")
                  and "sha256" in f.get("hashes", {})]
        chosen = max(wheels, key=lambda f: _version(f["filename"]))
        url = urllib.parse.urljoin(f"{index}/pip/", chosen["url"])
        with urllib.request.urlopen(url, timeout=120) as answer:
            data = answer.read()
    except (OSError, ValueError, KeyError) as exc:
        fail(f"cannot fetch pip from {index} ({exc}): install python3-venv (apt-get install python3-venv), "
             "or give PIP_FIND_LINKS a folder holding pip's wheel")
    if hashlib.sha256(data).hexdigest() != chosen["hashes"]["sha256"]:
        fail(f"{chosen['filename']} from {index} does not match the index's sha256")
    path = tmp / chosen["filename"]
    path.write_bytes(data)
    return path


def _version(filename: str) -> tuple[int, ...]:
    text = filename.split("-")[1]
    return tuple(int(p) if p.isdigit() else -1 for p in text.split("."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", action="append", default=None,
                        help="an extra of pyproject.toml to install too (repeatable; default: clients)")
    parser.add_argument("--venv", default=str(ROOT / ".venv"), help="where (default .venv in the checkout)")
    args = parser.parse_args()
    if sys.version_info < (3, 11):  # noqa: UP036 - this script runs on any python3, to say so
        fail(f"tmqgate needs Python 3.11 or newer; this python3 is {sys.version.split()[0]}")
    env_dir = Path(args.venv)
    extras = sorted(set(args.extra or ["clients"]))
    python = env_python(env_dir)
    if not python.exists() or not has_pip(python):
        create(env_dir)
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py"):
        digest.update((ROOT / name).read_bytes())
    stamp = env_dir / STAMP
    want = {"project": digest.hexdigest(), "extras": extras, "root": str(ROOT)}
    try:
        have = json.loads(stamp.read_text())
    except (OSError, ValueError):
        have = {}
    if {k: have.get(k) for k in ("project", "root")} == {k: want[k] for k in ("project", "root")} \
            and set(extras) <= set(have.get("extras", [])):
        log(f"{env_dir} is up to date (tmqgate[{','.join(have['extras'])}])")
        return
    extras = sorted(set(extras) | (set(have.get("extras", [])) if have.get("root") == str(ROOT) else set()))
    log(f"installing tmqgate[{','.join(extras)}] into {env_dir}")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--editable", f"{ROOT}[{','.join(extras)}]"])
    if done.returncode != 0:
        fail(f"pip could not install tmqgate[{','.join(extras)}] into {env_dir} (its messages are above)")
    stamp.write_text(json.dumps({**want, "extras": extras}))
    shown = os.path.relpath(env_dir) if env_dir.resolve().is_relative_to(Path.cwd()) else env_dir
    log(f"ready: {env_dir} (enter it with `. {shown}/bin/activate`)")


if __name__ == "__main__":
    main()
