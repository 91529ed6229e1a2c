#!/usr/bin/env bash
# Builds the runner image the docker-tier tests run: sandboxd-test-runner:latest.
#
# Nothing can be pulled here (the engine has no images and no registry), so
# the image is made from local files only: a FROM-scratch root holding the
# runner fixture, the shared libraries `ldd` says it needs, and a /workspace
# owned by the runner's unprivileged user (65534). Docker copies that
# directory's ownership into a new, empty workspace volume on first mount,
# which is how the runner can write to it.
#
# Usage: .ci/build-test-image.sh [FIXTURE]
#   FIXTURE defaults to $CARGO_TARGET_DIR (or ./target)/debug/runner-fixture;
#   build it first with `cargo build --workspace --bins`.
#   SANDBOXD_TEST_IMAGE overrides the image name.
#
# Idempotent and fast: the image carries the fixture's SHA-256 in a label,
# and an image whose label matches is kept as it is.
set -euo pipefail

image="${SANDBOXD_TEST_IMAGE:-sandboxd-test-runner:latest}"
label="sandboxd.test.fixture-sha256"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fixture="${1:-${CARGO_TARGET_DIR:-$root/target}/debug/runner-fixture}"

if [ ! -x "$fixture" ]; then
    echo "build-test-image: no runner fixture at $fixture — run 'cargo build --workspace --bins' first" >&2
    exit 1
fi
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    echo "build-test-image: no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset})" >&2
    exit 1
fi

# One build at a time: tests that need the image start in parallel, and two
# builds of one tag would each tag an image, the first left dangling. The
# lock is this script's own file, so nothing is left behind for it.
exec 9<"${BASH_SOURCE[0]}"
flock 9

sum="$(sha256sum "$fixture" | cut -d' ' -f1)"
old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
have="$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$image" 2>/dev/null || true)"
if [ "$have" = "$sum" ]; then
    echo "build-test-image: $image is up to date (fixture sha256 ${sum:0:12})"
    exit 0
fi

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT

install -m 0755 "$fixture" "$rootfs/runner-fixture"
# `ldd` prints "libc.so.6 => /lib/…/libc.so.6 (0x…)" for libraries and
# "/lib64/ld-linux-x86-64.so.2 (0x…)" for the loader; vdso has no file.
# A static fixture has none of these (and ldd then exits 1).
{ ldd "$fixture" || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' |
    while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
mkdir -p "$rootfs/workspace" "$rootfs/tmp"
chmod 0700 "$rootfs/workspace"
chown 65534:65534 "$rootfs/workspace"
chmod 1777 "$rootfs/tmp"

tar --numeric-owner -C "$rootfs" -cf - . |
    docker import \
        --change 'ENTRYPOINT ["/runner-fixture"]' \
        --change 'WORKDIR /workspace' \
        --change "LABEL $label=$sum" \
        - "$image" >/dev/null

# The previous build, now untagged, goes unless a container still uses it.
if [ -n "$old_id" ]; then
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi
echo "build-test-image: built $image (fixture sha256 ${sum:0:12})"
