#!/usr/bin/env bash
# Fetch Kafka Connect's and Kafka Streams' jars (pinned in compat_tests/java/connect/pom.xml)
# into compat_tests/java/connect-lib/ so the Connect and Streams tests never download
# anything at run time.  Called by scripts/install_java.sh; idempotent (does nothing when connect-lib/
# matches the current pom.xml), `--force` re-resolves.  Honours MAVEN_REPO_LOCAL.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$HERE/pom.xml"
LIB="$HERE/../connect-lib"
STAMP="$LIB/.installed-pom.sha256"

log() { echo "install_connect_jars: $*" >&2; }

want="$(sha256sum "$POM" | cut -d' ' -f1)"
if [[ "${1:-}" != "--force" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] \
    && compgen -G "$LIB/connect-runtime-*.jar" >/dev/null \
    && compgen -G "$LIB/kafka-clients-*.jar" >/dev/null; then
    log "up to date: $(find "$LIB" -maxdepth 1 -name '*.jar' | wc -l) jars in $LIB"
    exit 0
fi

mvn_args=(-q -B -Dstyle.color=never -f "$POM")
if [[ -n "${MAVEN_REPO_LOCAL:-}" ]]; then
    mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
fi

start=$(date +%s)
rm -rf "$LIB"
mkdir -p "$LIB"
log "resolving connect-runtime, connect-file, connect-json, kafka-streams with Maven"
mvn "${mvn_args[@]}" package
echo "$want" >"$STAMP"
log "installed $(find "$LIB" -maxdepth 1 -name '*.jar' | wc -l) jars ($(du -sh "$LIB" | cut -f1)) into $LIB in $(($(date +%s) - start))s"
