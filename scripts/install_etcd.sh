#!/usr/bin/env bash
# etcd (v3) for the cluster tests (issue 16): Debian's etcd-server, once. Idempotent: nothing
# to do when `etcd` is on PATH. Needs root (CI runs as root); elsewhere the cluster tests skip.
set -euo pipefail
if command -v etcd >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install_etcd: not root; the cluster tests will skip (apt-get install etcd-server)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq etcd-server >/dev/null
etcd --version | head -1
