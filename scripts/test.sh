#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it all: ruff, the
# layering checks (mypy, import-linter), and pytest in lanes that run side by side —
#   tmqgate    the compatibility suite against tmqgate
#   kafka      the compatibility suite again against the reference Apache Kafka broker
#              (tests of tmqgate-only features skip there): it shows the tests are honest
#   unit       the unit tests (tests/), among them the container image, the compose stack and
#              part of the compatibility suite against the image (--target tmqgate-container)
# Modules marked `serial` (broker kills, soaks, clusters) take a lock shared by the lanes, so
# no two of them run at once (compat_tests/serial.py).
#
#   scripts/test.sh                 everything (what CI runs: .ci/run)
#   scripts/test.sh --fast          ruff, the layering checks and the unit tests that need no
#                                   Java, etcd or Docker: for edit-test loops
#   scripts/test.sh -k something    extra arguments go to every pytest lane
#
# Everything runs in the checkout's own virtual environment, .venv (scripts/bootstrap.py makes
# it), so nothing the machine happens to have installed can stand in for a missing dependency.
# TMQGATE_CI=1 (set by .ci/run) turns a test's missing dependency into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [[ "${1:-}" == "--fast" ]]; then
    fast=1
    shift
fi
python3 scripts/bootstrap.py --extra test
# shellcheck disable=SC1091
. .venv/bin/activate  # python3, pytest and tmqgate are the venv's from here on
python3 -m ruff check .
bash scripts/check_layers.sh
pytest=(python3 -m pytest -q -p no:cacheprovider)
if (( fast )); then
    exec "${pytest[@]}" -m "not slow and not container" tests "$@"
fi
bash scripts/install_java.sh
bash scripts/install_etcd.sh
bash scripts/install_docker.sh

# The lanes' logs in the checkout (a test may clean the machine's temporary folders)
logs="$PWD/.test-logs"
rm -rf "$logs"
mkdir -p "$logs"
export TMQGATE_TEST_LOCK="$logs/serial.lock"
lanes=(tmqgate kafka unit)
run_lane() {
    local lane=$1 rc=0 start=$SECONDS args order=
    shift
    # order: the serial modules of tmqgate's lane (brokers in Python) first, of Kafka's (JVM
    # clusters) last, so that the two seldom wait for each other
    case "$lane" in
        tmqgate) args=(compat_tests) order=first ;;
        kafka) args=(compat_tests --target kafka) order=last ;;
        unit) args=(tests) ;;
    esac
    TMQGATE_TEST_SERIAL=$order PYTHONUNBUFFERED=1 "${pytest[@]}" --durations=20 --junitxml="$logs/$lane.xml" \
        "${args[@]}" "$@" >"$logs/$lane.log" 2>&1 || rc=$?
    echo "lane $lane: exit $rc after $((SECONDS - start)) s" >>"$logs/$lane.log"
    return $rc
}
started=$SECONDS
pids=()
for lane in "${lanes[@]}"; do
    run_lane "$lane" "$@" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
for lane in "${lanes[@]}"; do
    echo "=================================== lane $lane ==================================="
    cat "$logs/$lane.log"
done
echo "all lanes: $((SECONDS - started)) s, exit $status"
exit $status
