#!/usr/bin/env bash
# The soaks at their full cycle counts (TMQGATE_TEST_SOAK=full; the suite runs them with counts
# sized for CI's time budget: compat_tests/helpers.soak_cycles), against tmqgate and against the
# reference Apache Kafka broker, one after the other. Run it before closing an issue that touches
# replication, transactions or durability; the figures (kills, records, lost, duplicated,
# failover times) are printed at the end of each run.
#
#   scripts/soak.sh                 both targets
#   scripts/soak.sh --target kafka  one (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/bootstrap.py --extra test
# shellcheck disable=SC1091
. .venv/bin/activate
bash scripts/install_java.sh
bash scripts/install_etcd.sh
export TMQGATE_TEST_SOAK=full
modules=(compat_tests/test_cluster_replication.py compat_tests/test_transactions_soak.py)
if [[ $# -gt 0 ]]; then
    exec python3 -m pytest -q -p no:cacheprovider "${modules[@]}" "$@"
fi
status=0
for target in tmqgate kafka; do
    python3 -m pytest -q -p no:cacheprovider "${modules[@]}" --target "$target" || status=1
done
exit $status
