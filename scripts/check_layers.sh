#!/usr/bin/env bash
# Static checks of the package structure: mypy (strict where pyproject.toml says so) and
# import-linter's layer contracts ([tool.importlinter] in pyproject.toml).
#
#   scripts/check_layers.sh            # both
#   scripts/check_layers.sh mypy       # one of them
#   scripts/check_layers.sh imports
#
# tmqgate.protocol, .storage, ... live in top-level folders named protocol/, storage/, ...
# (setuptools package-dir).  Neither tool follows setuptools' editable-install finder, and
# the folders' own names are not the import names, so both run over .mypy-shim/tmqgate/,
# a folder of symlinks generated here from pyproject.toml's package-dir (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'EOF'
import os, shutil, tomllib
from pathlib import Path

mapping = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
shim = Path(".mypy-shim")
if shim.exists():
    shutil.rmtree(shim)
(shim / "tmqgate").mkdir(parents=True)  # no __init__.py: tmqgate is a namespace package
for name, folder in mapping.items():
    parts = name.split(".")
    assert parts[0] == "tmqgate" and len(parts) == 2, name
    os.symlink(os.path.relpath(folder, shim / "tmqgate"), shim / "tmqgate" / parts[1])
EOF

what="${1:-all}"
status=0
if [[ "$what" == all || "$what" == mypy ]]; then
    # Packages come from pyproject's [tool.mypy] mypy_path (the shim); strictness per package
    # from its overrides.
    python3 -m mypy -p tmqgate.protocol -p tmqgate.storage -p tmqgate.coordinator \
        -p tmqgate.broker -p tmqgate.pipelines || status=$?
fi
if [[ "$what" == all || "$what" == imports ]]; then
    # lint-imports, run by this python3 (whose site-packages has import-linter)
    PYTHONPATH="$PWD/.mypy-shim" python3 -c \
        'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' \
        --no-cache --no-logo || status=$?
fi
exit $status
