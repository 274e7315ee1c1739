#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it all: ruff, the
# layering checks (mypy, import-linter), and pytest in lanes that run side by side —
#   serial     the modules marked `serial` (broker kills, soaks, clusters), against tmqgate,
#              then against the reference Apache Kafka broker: timing-sensitive, and each
#              loads the machine on its own, so they run one at a time
#   tmqgate    the rest of the compatibility suite against tmqgate
#   kafka      the rest again against the reference Kafka (tests of tmqgate-only features
#              skip there): it shows the tests are honest
#   workers    the groups, transactions, SQL and security modules of the compatibility suite
#              against `tmqgate serve --workers 2` (--target tmqgate-workers, issue 28)
#   unit       the unit tests (tests/), among them the container image, the compose stack and
#              part of the compatibility suite against the image (--target tmqgate-container);
#              then the compat modules from test_t… on against tmqgate, from test_tr… on against Kafka
#              (taken from the two lanes above, so that the lanes end together)
# Five lanes on two cores keep both busy to the end (CPU-bound lanes of unequal length left
# one idle for a third of the run). The serial modules still take the lock of
# compat_tests/serial.py, so that one run by another pytest given the same lock file
# (TMQGATE_TEST_LOCK) never overlaps them.
#
#   scripts/test.sh                 everything (what CI runs: .ci/run)
#   scripts/test.sh --fast          ruff, the layering checks and the unit tests that need no
#                                   Java, etcd or Docker: for edit-test loops
#   scripts/test.sh -k something    extra arguments go to every pytest run
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
# The servers, jars and the franz-go program the suite needs are installed (mostly waiting on
# Maven, apt, dockerd and the Go module proxy)
# while the virtual environment is made; not for --fast, which needs none of them.
if (( ! fast )); then
    installers_log=$(mktemp)
    { bash scripts/install_java.sh && bash scripts/install_etcd.sh && bash scripts/install_docker.sh \
          && bash scripts/install_go_client.sh; } \
        >"$installers_log" 2>&1 &
    installers=$!
fi
python3 scripts/bootstrap.py --extra test
# shellcheck disable=SC1091
. .venv/bin/activate  # python3, pytest and tmqgate are the venv's from here on
pytest=(python3 -m pytest -q -p no:cacheprovider)
if (( fast )); then
    python3 -m ruff check .
    bash scripts/check_layers.sh
    exec "${pytest[@]}" -m "not slow and not container" tests "$@"
fi
# ruff and the layering checks (mypy: ~30 s) run beside the installers and the lanes; their
# output and verdict come after the lanes'. The checkout's modules are compiled before the lanes
# start: with PYTHONDONTWRITEBYTECODE set (as on this machine) every broker, CLI and pytest
# started would compile them again, 0.4 s of CPU for each broker.
checks_log=$(mktemp)
{ python3 -m ruff check . && bash scripts/check_layers.sh; } >"$checks_log" 2>&1 &
checks=$!
python3 -m compileall -q -j 0 broker coordinator storage protocol pipelines compat_tests tests bench scripts >/dev/null
# the output of a background step (its pid, its log), then its failure ends the run (naming it)
finish() {
    local pid=$1 log=$2 what=$3 rc=0
    wait "$pid" || rc=$?
    cat "$log"
    rm -f "$log"
    if (( rc )); then
        echo "$what failed: exit $rc"
        exit "$rc"
    fi
}
finish "$installers" "$installers_log" "installing the suite's servers and jars"

# The lanes' logs in the checkout (a test may clean the machine's temporary folders)
logs="$PWD/.test-logs"
rm -rf "$logs"
mkdir -p "$logs"
export TMQGATE_TEST_LOCK="$logs/serial.lock"
lanes=(serial tmqgate kafka unit workers)
# what --target tmqgate-workers runs in CI: every module whose answers depend on which broker a
# client reaches (coordinators, partition leaders, the shared catalog: users, ACLs, configs, quotas)
workers_modules=(compat_tests/test_groups.py compat_tests/test_groups_offsets.py compat_tests/test_groups_admin.py
                 compat_tests/test_admin.py compat_tests/test_transactions.py compat_tests/test_txn_version2.py
                 compat_tests/test_txn_coordinator.py compat_tests/test_go_client.py compat_tests/test_internal_topics.py
                 compat_tests/test_tdengine_power.py compat_tests/test_tdengine_groups.py
                 compat_tests/test_sql_authorizer.py compat_tests/test_sql_users.py compat_tests/test_acls.py
                 compat_tests/test_sasl.py compat_tests/test_dynamic_configs.py compat_tests/test_client_quotas.py
                 compat_tests/test_share_groups.py compat_tests/test_share_groups_go.py compat_tests/test_share_tools.py
                 compat_tests/test_share_errors.py compat_tests/test_regex_subscription.py)
# The unit tests end ~15 minutes before the compat lanes: the compat modules from test_t… on
# (against Kafka: from test_tr… on, its TLS modules are slower) run after them, in the unit
# lane, so that the lanes end together (r8: one core 10-30 % idle for the last third of
# the run; r9 with test_t… on for both: the unit lane last, 250 s after the others).
tmqgate_late=("compat_tests/test_[t-z]*.py")
kafka_late=("compat_tests/test_t[r-z]*.py" "compat_tests/test_[u-z]*.py")
# one pytest run: its name (for its JUnit XML), then its arguments; $nice before it
run_pytest() {
    local name=$1
    shift
    PYTHONUNBUFFERED=1 $nice "${pytest[@]}" --durations=20 --junitxml="$logs/$name.xml" "$@"
}
run_lane() {
    local lane=$1 rc=0 start=$SECONDS nice="nice -n 5"
    shift
    # The serial lane is the longest and the most timing-sensitive: the others yield the CPU to it.
    [[ "$lane" == serial ]] && nice=
    {
        case "$lane" in
            serial)
                run_pytest serial-tmqgate compat_tests -m serial "$@" || rc=$?
                run_pytest serial-kafka compat_tests --target kafka -m serial "$@" || rc=$? ;;
            tmqgate) run_pytest tmqgate compat_tests -m "not serial" "${tmqgate_late[@]/#/--ignore-glob=}" "$@" || rc=$? ;;
            workers) run_pytest workers --target tmqgate-workers -m "not serial" \
                                    "${workers_modules[@]}" "$@" \
                         || rc=$? ;;
            kafka) run_pytest kafka compat_tests --target kafka -m "not serial" "${kafka_late[@]/#/--ignore-glob=}" "$@" \
                       || rc=$? ;;
            unit)
                run_pytest unit tests "$@" || rc=$?
                # shellcheck disable=SC2068 # the globs are meant to expand
                run_pytest tmqgate-t-z -m "not serial" ${tmqgate_late[@]} "$@" || rc=$?
                # shellcheck disable=SC2068
                run_pytest kafka-tr-z --target kafka -m "not serial" ${kafka_late[@]} "$@" || rc=$? ;;
        esac
        echo "lane $lane: exit $rc after $((SECONDS - start)) s"
    } >"$logs/$lane.log" 2>&1
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
finish "$checks" "$checks_log" "ruff or the layering checks"
exit $status
