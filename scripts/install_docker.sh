#!/usr/bin/env bash
# A Docker engine and the local base images the container tests build on, for a machine that
# reaches Debian's archive but no image registry (issue 24). Idempotent: each step is skipped
# when its result is already there, so a second run takes about a second. Run as root.
#
#   scripts/install_docker.sh
#
# 1. apt: docker.io (the engine), debootstrap, and Compose — `docker compose` (v2) where the
#    Docker CLI has the plugin, else Debian's docker-compose (v1.29, which reads deploy/compose.yaml;
#    bookworm has no v2 package).
# 2. dockerd started in the background (log: $TMQGATE_DOCKERD_LOG) unless an engine answers.
# 3. Three local images, none pulled from a registry:
#    tmqgate-local/debian:bookworm   debootstrap --variant=minbase of the Debian archive apt uses
#                                    (apt's package lists kept: apt-get install works without update)
#    tmqgate-local/python3:bookworm  + python3 only (no pip, no venv): a fresh machine for the README test
#    tmqgate-local/python:3.11       + python3-venv, a venv at /opt/venv first on PATH: what
#                                    python:3.11-slim gives deploy/Dockerfile (python, pip)
#    deploy/Dockerfile builds on the last: --build-arg BASE_IMAGE=tmqgate-local/python:3.11
#    (compat_tests/images.py does it with wheels built on the host).
# Set TMQGATE_DEBIAN_MIRROR to bootstrap from another mirror than apt's own.
set -euo pipefail

DEBIAN_IMAGE=tmqgate-local/debian:bookworm
PYTHON3_IMAGE=tmqgate-local/python3:bookworm
PYTHON_IMAGE=tmqgate-local/python:3.11
# Bumped when a recipe below changes: an image with another recipe label is built again.
RECIPE=2
LOG=${TMQGATE_DOCKERD_LOG:-/var/log/tmqgate-dockerd.log}
START=$SECONDS

say() { printf 'install_docker: %s (%ss)\n' "$*" "$((SECONDS - START))"; }

if [ "$(id -u)" != 0 ]; then
    echo "install_docker: run as root (apt-get, dockerd, debootstrap)" >&2
    exit 1
fi

# --- 1. packages ---------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
    missing+=(docker-compose)
fi
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # the machine's lists may be old or absent: update only when the install cannot find them
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
fi

# --- 2. the engine ---------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
    say "starting dockerd (log: $LOG)"
    setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    if ! docker info >/dev/null 2>&1; then
        echo "install_docker: dockerd did not answer within 60 s; its log ($LOG) ends:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
    fi
fi

# --- 3. local base images --------------------------------------------------------------------
made=""       # set once an image is made: those built on it are made again too
replaced=()   # the images that the ones made anew replace: removed at the end unless still in use

have() {  # the image exists, made by this RECIPE, and nothing below it was made anew
    [ -z "$made" ] && [ "$(docker image inspect -f '{{index .Config.Labels "org.tmqgate.recipe"}}' "$1" 2>/dev/null)" = "$RECIPE" ]
}

image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

mirror() {  # the Debian archive apt uses for bookworm (deb822 .sources or one-line lists)
    if [ -n "${TMQGATE_DEBIAN_MIRROR:-}" ]; then echo "$TMQGATE_DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u != "" {print u; exit} /^$/ {u=""}' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

build() {  # build NAME from the Dockerfile on stdin (no context); its output shown if it fails
    say "docker build $1"
    local out
    replaced+=("$(image_id "$1")")
    out=$(mktemp)
    if ! docker build -t "$1" --label "org.tmqgate.recipe=$RECIPE" - >"$out" 2>&1; then
        cat "$out" >&2
        rm -f "$out"
        exit 1
    fi
    rm -f "$out"
    made=1
}

if ! have "$DEBIAN_IMAGE"; then
    root=$(mktemp -d /var/tmp/tmqgate-debootstrap.XXXXXX)
    trap 'rm -rf "$root" "$root.log"' EXIT
    # dpkg without fsync (as in Debian's official images: a failed build is thrown away) and apt
    # without recommends or caches, set before debootstrap so that it runs dpkg so too
    mkdir -p "$root/etc/dpkg/dpkg.cfg.d" "$root/etc/apt/apt.conf.d"
    echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
    cat >"$root/etc/apt/apt.conf.d/docker-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    url=$(mirror)
    say "debootstrap --variant=minbase bookworm from $url"
    debootstrap --variant=minbase bookworm "$root" "$url" >"$root.log" 2>&1 \
        || { tail -n 20 "$root.log" >&2; exit 1; }
    rm -f "$root"/var/cache/apt/archives/*.deb
    say "docker import $DEBIAN_IMAGE"
    replaced+=("$(image_id "$DEBIAN_IMAGE")")
    tar -C "$root" -c . | docker import -c 'CMD ["bash"]' -c "LABEL org.tmqgate.recipe=$RECIPE" - "$DEBIAN_IMAGE" >/dev/null
    rm -rf "$root" "$root.log"
    trap - EXIT
    made=1
fi

# apt's package lists come with the base image; where they have gone stale (a package replaced
# in the archive since), the install fails and is retried after apt-get update
if ! have "$PYTHON3_IMAGE"; then
    build "$PYTHON3_IMAGE" <<EOF
FROM $DEBIAN_IMAGE
RUN apt-get install -y -q python3 || { apt-get update -q && apt-get install -y -q python3; }
CMD ["python3"]
EOF
fi

if ! have "$PYTHON_IMAGE"; then
    build "$PYTHON_IMAGE" <<EOF
FROM $PYTHON3_IMAGE
RUN (apt-get install -y -q python3-venv || { apt-get update -q && apt-get install -y -q python3-venv; }) \\
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:\$PATH LANG=C.UTF-8
CMD ["python3"]
EOF
fi

for ((i = ${#replaced[@]} - 1; i >= 0; i--)); do  # the last made first: images built on others
    [ -z "${replaced[i]}" ] || docker rmi "${replaced[i]}" >/dev/null 2>&1 || true
done

if docker compose version >/dev/null 2>&1; then compose="docker compose"; else compose=docker-compose; fi
say "ready: engine $(docker version -f '{{.Server.Version}}'), $compose, images $DEBIAN_IMAGE $PYTHON3_IMAGE $PYTHON_IMAGE"
