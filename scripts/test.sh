#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it all.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
if [ -x scripts/install_java.sh ]; then
    bash scripts/install_java.sh
fi
python3 -m ruff check .
exec python3 -m pytest -q -p no:cacheprovider "$@"
