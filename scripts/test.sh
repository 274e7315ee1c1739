#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it all:
# unit tests and the compatibility suite against tmqgate, then the compatibility suite again
# against the reference Apache Kafka broker (tests of tmqgate-only features skip there),
# which is what shows the compatibility tests are honest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash scripts/install_java.sh
bash scripts/install_etcd.sh
python3 -m ruff check .
# Types (mypy) and the package layering (import-linter): see scripts/check_layers.sh.
bash scripts/check_layers.sh
status=0
python3 -m pytest -q -p no:cacheprovider --durations=15 tests compat_tests "$@" || status=$?
python3 -m pytest -q -p no:cacheprovider --durations=15 compat_tests --target kafka "$@" || status=$?
exit $status
