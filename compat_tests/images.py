"""The tmqgate image (deploy/Dockerfile) built for the container tests, on a machine that may
reach no image registry and whose containers may not reach a package index (issue 24).

- The base: tmqgate-local/python:3.11 where scripts/install_docker.sh made it (from Debian's
  archive, nothing pulled), else the Dockerfile's default, the official python:3.11-slim.
- The dependencies: wheels downloaded on the host (`pip download --only-binary=:all:` for
  CPython 3.11 on manylinux x86_64, pip's own index and trust settings) into a wheelhouse cached
  under ~/.cache/tmqgate-images, keyed by pyproject.toml's dependencies: the Dockerfile installs
  them with --no-index (build argument WHEELS), then tmqgate itself from its source.
- The build context: the checkout's product files only (git's tracked and untracked-but-not-
  ignored files of the packages, pyproject.toml, setup.py, README.md, deploy/) and the wheels —
  not the Java jars, virtual environments and data folders the checkout may hold.
- The image is labelled with a hash of everything that goes into it: an image with the same
  label is used as it is (no build at all); otherwise Docker's layer cache keeps the dependency
  layer when only tmqgate's code changed.

build_spark_image() builds deploy/spark/Dockerfile (compose's spark-job) likewise: PySpark's
wheel (PyPI has only its source: `pip wheel` builds it once, pip's cache keeps it), the Kafka
connector jars scripts/install_java.sh resolved (compat_tests/java/spark-lib, build argument
SPARK_JARS: no Maven image) and Debian's JRE, apt-installed in the image.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL_BASE = "tmqgate-local/python:3.11"
OFFICIAL_BASE = "python:3.11-slim"
IMAGE = "tmqgate:compat-test"
SPARK_IMAGE = "tmqgate-spark:compat-test"
SPARK_DOCKERFILE = "deploy/spark/Dockerfile"
SPARK_JARS = ROOT / "compat_tests" / "java" / "spark-lib"
#: What the image is built from: the packages (pyproject's package-dir folders), the files the
#: build reads, and deploy/ (the Dockerfile, the config it copies).
PRODUCT = ("protocol", "storage", "coordinator", "broker", "pipelines")
TOP_FILES = ("pyproject.toml", "setup.py", "README.md")
DEPLOY_FILES = ("deploy/Dockerfile", "deploy/tmqgate.toml")
#: The wheels' target: the images' Python (python:3.11-slim and Debian bookworm's are CPython 3.11
#: on glibc 2.36), whatever the host's: every manylinux tag that glibc 2.36 runs.
WHEEL_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3",
                "--abi", "none",
                *[arg for minor in range(36, 4, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")],
                "--platform", "manylinux2014_x86_64", "--platform", "manylinux2010_x86_64",
                "--platform", "manylinux1_x86_64"]
LABEL = "org.tmqgate.build"
_built: dict[tuple[str, str], str] = {}


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "tmqgate-images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements() -> list[str]:
    """What the wheelhouse holds: tmqgate's dependencies and its build requirements (the image
    builds tmqgate from source with --no-index)."""
    project = _pyproject()
    return [*project["project"]["dependencies"], *project["build-system"]["requires"]]


def wheelhouse(extra: tuple[str, ...] = ()) -> Path:
    """The folder of wheels for requirements() and `extra` requirements (e.g. ("pip",
    "kafka-python==3.0.12") for a container that installs tmqgate[clients] without an index),
    downloaded once per set of requirements."""
    wanted = [*requirements(), *extra]
    key = hashlib.sha256("\n".join([*wanted, *WHEEL_TARGET]).encode()).hexdigest()[:16]
    return _cached_wheels(f"wheels-{key}", ["download", "--only-binary=:all:", *WHEEL_TARGET, *wanted], 900)


def spark_wheelhouse() -> Path:
    """PySpark's wheel and its dependencies' (py4j), at deploy/spark/Dockerfile's pin."""
    pin = re.search(r"^ARG PYSPARK=(\S+)$", (ROOT / SPARK_DOCKERFILE).read_text(), re.M).group(1)
    return _cached_wheels(f"spark-wheels-{pin.replace('==', '-')}", ["wheel", pin], 1800)


def _cached_wheels(name: str, pip_args: list[str], timeout: float) -> Path:
    """cache_dir()/`name`, made once by `pip PIP_ARGS` into it (a folder marked complete, so a
    run killed halfway leaves nothing that looks done)."""
    final = cache_dir() / name
    if (final / ".complete").exists():
        return final
    partial = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache_dir()))
    try:
        verb, *rest = pip_args
        dest = "--dest" if verb == "download" else "--wheel-dir"
        done = subprocess.run([sys.executable, "-m", "pip", verb, "--quiet", "--disable-pip-version-check",
                               dest, str(partial), *rest], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"pip {' '.join(pip_args)} failed:\n{done.stdout}{done.stderr}")
        (partial / ".complete").write_text("")
        try:
            partial.rename(final)
        except OSError:  # another process made it meanwhile
            pass
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


def product_files(*more: str) -> list[str]:
    """The checkout's files the image is built from (paths relative to ROOT; `more`: further
    folders or files), sorted: git's tracked and untracked-but-not-ignored files where this is a
    git checkout."""
    paths = [*PRODUCT, *TOP_FILES, *DEPLOY_FILES, *more]
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                                cwd=ROOT, capture_output=True, check=True, timeout=60).stdout.decode()
        files = {f for f in listed.split("\0") if f}
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the folders as they are
        files = {str(p.relative_to(ROOT)) for d in PRODUCT for p in (ROOT / d).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
        files |= set(TOP_FILES) | set(DEPLOY_FILES)
        files |= {str(p.relative_to(ROOT)) for d in more for p in (ROOT / d).rglob("*") if p.is_file()}
    return sorted(f for f in files if (ROOT / f).is_file())  # a deleted file git still lists is left out


def _digest(files: dict[str, Path], *extra: str) -> str:
    h = hashlib.sha256()
    for part in extra:
        h.update(part.encode() + b"\0")
    for name, path in sorted(files.items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def base_image(client: object) -> str:
    """tmqgate-local/python:3.11 where it exists, else the official image (pulled by the build)."""
    import docker.errors

    try:
        client.images.get(LOCAL_BASE)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return OFFICIAL_BASE
    return LOCAL_BASE


def build_image(tag: str = IMAGE) -> str:
    """deploy/Dockerfile built as `tag` from the checkout (once per process; not at all when an
    image with the same content label exists). Returns the tag. RuntimeError when it fails, with
    the build's log and what to run."""
    return _build("deploy/Dockerfile", tag, {f: ROOT / f for f in product_files()}, [wheelhouse()], {})


def build_spark_image(tag: str = SPARK_IMAGE) -> str:
    """deploy/spark/Dockerfile (compose's spark-job) built as `tag`, as build_image() builds
    the broker's: the connector jars from compat_tests/java/spark-lib (FileNotFoundError where
    scripts/install_java.sh has not made it), PySpark from a wheel."""
    jars = sorted(SPARK_JARS.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no Spark connector jars in {SPARK_JARS}: run scripts/install_java.sh")
    files = {f: ROOT / f for f in product_files("deploy/spark", "compat_tests/java/spark")}
    files |= {f"spark-jars/{jar.name}": jar for jar in jars}
    return _build(SPARK_DOCKERFILE, tag, files, [wheelhouse(), spark_wheelhouse()], {"SPARK_JARS": "spark-jars"},
                  jars_stage=True)


def _build(dockerfile: str, tag: str, files: dict[str, Path], wheel_dirs: list[Path], args: dict[str, str],
           jars_stage: bool = False) -> str:
    """`dockerfile` built as `tag` from a context of `files` (context path -> file) and the wheels
    of `wheel_dirs` in wheels/, with the build arguments `args`, BASE_IMAGE and WHEELS (and
    JARS_IMAGE, the base too, for a Dockerfile with a jars stage)."""
    import docker
    import docker.errors

    client = docker.from_env()
    base = base_image(client)
    if (tag, base) in _built:
        return tag
    wheels = {p.name: p for d in wheel_dirs for p in d.glob("*.whl")}
    try:  # the base's id: a base made anew (scripts/install_docker.sh) makes the image anew
        base_id = client.images.get(base).id
    except docker.errors.ImageNotFound:
        base_id = base
    buildargs = {"BASE_IMAGE": base, "WHEELS": "wheels", **({"JARS_IMAGE": base} if jars_stage else {}), **args}
    digest = _digest(files, dockerfile, base_id, *sorted(wheels), *(f"{k}={v}" for k, v in sorted(buildargs.items())))
    try:
        if client.images.get(tag).labels.get(LABEL) == digest:
            _built[(tag, base)] = digest
            return tag
    except docker.errors.ImageNotFound:
        pass
    context = Path(tempfile.mkdtemp(prefix="context-", dir=cache_dir()))
    try:
        for name, path in files.items():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, context / name)
        (context / "wheels").mkdir()
        for name, path in wheels.items():
            try:  # same file system (the cache): no copy
                os.link(path, context / "wheels" / name)
            except OSError:
                shutil.copy2(path, context / "wheels" / name)
        from testcontainers.core.image import DockerImage

        try:
            DockerImage(path=str(context), dockerfile_path=dockerfile, tag=tag, clean_up=False,
                        buildargs=buildargs, labels={LABEL: digest}, rm=True, forcerm=True).build()
        except docker.errors.BuildError as exc:
            log = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log)
            hint = "" if base == LOCAL_BASE else (
                f" ({base} could not be had: scripts/install_docker.sh makes the local base {LOCAL_BASE})")
            raise RuntimeError(f"docker build of {dockerfile} on {base} failed{hint}: {exc.msg}\n"
                               f"{log[-4000:]}") from None
    finally:
        shutil.rmtree(context, ignore_errors=True)
    _built[(tag, base)] = digest
    return tag
