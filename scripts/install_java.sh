#!/usr/bin/env bash
# Fetch the reference Apache Kafka jars (pinned in compat_tests/java/pom.xml)
# into compat_tests/java/lib/ so the compatibility tests never download
# anything at test time.
#
# Idempotent: when lib/ already matches the current pom.xml it does nothing.
#   scripts/install_java.sh           # install / refresh if pom.xml changed
#   scripts/install_java.sh --force   # re-resolve and re-copy regardless
#
# Honours MAVEN_REPO_LOCAL (alternate local repository, e.g. for a CI cache).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JAVA_DIR="$ROOT/compat_tests/java"
POM="$JAVA_DIR/pom.xml"
LIB="$JAVA_DIR/lib"
STAMP="$LIB/.installed-pom.sha256"

force=0
if [[ "${1:-}" == "--force" ]]; then
    force=1
fi

log() { echo "install_java: $*" >&2; }

# A JDK and Maven are needed; install them from Debian's packages if missing.
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
        log "installing openjdk-17-jdk-headless and maven with apt-get"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
    else
        log "java and mvn are required (OpenJDK 17+, Maven 3.8+)"
        exit 1
    fi
fi

# Spark's Kafka connector jars: own pom and folder (they need kafka-clients 3.9.x)
bash "$JAVA_DIR/spark/install.sh" "$@"
# Kafka Connect and Kafka Streams (4.3.1): own pom and folder (Connect's Jetty/Jersey stack
# stays off the broker's and the tools' classpath)
bash "$JAVA_DIR/connect/install.sh" "$@"

want="$(sha256sum "$POM" | cut -d' ' -f1)"
jar_count() { find "$LIB" -maxdepth 1 -name '*.jar' 2>/dev/null | wc -l; }

if [[ $force -eq 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] \
    && compgen -G "$LIB/kafka_2.13-*.jar" >/dev/null \
    && compgen -G "$LIB/kafka-clients-*.jar" >/dev/null; then
    log "up to date: $(jar_count) jars in $LIB"
    exit 0
fi

mvn_args=(-q -B -Dstyle.color=never -f "$POM")
if [[ -n "${MAVEN_REPO_LOCAL:-}" ]]; then
    mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
fi

start=$(date +%s)
# Start from an empty lib/ so a version bump never leaves two kafka-clients
# (or two log4j) versions side by side on the classpath.
rm -rf "$LIB"
mkdir -p "$LIB"
log "resolving Kafka jars with Maven (a cold ~/.m2 downloads ~65 MB, ~1 min)"
mvn "${mvn_args[@]}" package
echo "$want" >"$STAMP"

count="$(jar_count)"
size="$(du -sh "$LIB" | cut -f1)"
log "installed $count jars ($size) into $LIB in $(($(date +%s) - start))s"
echo "$count jars"
