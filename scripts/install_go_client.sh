#!/usr/bin/env bash
# The franz-go test program (compat_tests/go: kgo and kadm pinned in go.mod / go.sum) built once
# into compat_tests/go/bin/gokafka-<hash of its sources>, the file compat_tests/go_client.py
# runs, so the tests neither build nor download anything. Idempotent: nothing to do when that
# file exists. Needs Go 1.26 (https://go.dev/dl/; Debian's golang-go is too old) and, the
# first time, the Go module proxy. Without Go: under CI (TMQGATE_CI / CI set) the run fails,
# elsewhere the franz-go tests skip naming this script.
set -euo pipefail
cd "$(dirname "$0")/../compat_tests/go"
log() { echo "install_go_client: $*" >&2; }
go=$(command -v go || true)
[[ -z "$go" && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
if [[ -z "$go" ]]; then
    ci=$(printf '%s %s' "${TMQGATE_CI:-}" "${CI:-}" | tr '[:upper:]' '[:lower:]')
    if [[ " $ci " =~ \ (1|true|yes)\  ]]; then
        log "no Go toolchain on PATH: install Go 1.26 (https://go.dev/dl/)"
        exit 1
    fi
    log "no Go toolchain on PATH; the franz-go tests will skip (install Go 1.26 from https://go.dev/dl/)"
    exit 0
fi
# the same hash as go_client.program(): sha256 of main.go, go.mod and go.sum, first 16 digits
hash=$(cat main.go go.mod go.sum | sha256sum | cut -c1-16)
out="bin/gokafka-$hash"
if [[ -x "$out" ]]; then
    log "up to date: $out"
    exit 0
fi
mkdir -p bin
rm -f bin/gokafka-*
start=$(date +%s)
GOFLAGS=-mod=readonly "$go" build -trimpath -buildvcs=false -o "$out.tmp" .
mv "$out.tmp" "$out"
log "built $out with $("$go" env GOVERSION) in $(($(date +%s) - start)) s"
