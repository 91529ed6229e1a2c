#!/usr/bin/env bash
# Builds sandboxd's image (deploy/image/Dockerfile) from local files only:
# the sandboxd binary and the shared libraries it links, on an empty image.
#
# Usage: deploy/image/build.sh [BINARY] [IMAGE]
#   BINARY defaults to $CARGO_TARGET_DIR (or ./target)/release/sandboxd;
#   IMAGE to sandboxd:<version the binary prints>.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
binary="${1:-${CARGO_TARGET_DIR:-$root/target}/release/sandboxd}"
if [ ! -x "$binary" ]; then
    echo "build.sh: no sandboxd binary at $binary — run 'cargo build --release --locked -p sandboxd' first" >&2
    exit 1
fi
version="$("$binary" --version | awk '{ print $2 }')"
image="${2:-sandboxd:$version}"

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$here/Dockerfile" "$context/Dockerfile"
rootfs="$context/rootfs"
install -D -m 0755 "$binary" "$rootfs/usr/local/bin/sandboxd"
# `ldd` prints "libc.so.6 => /lib/…/libc.so.6 (0x…)" for libraries and
# "/lib64/ld-linux-x86-64.so.2 (0x…)" for the loader; vdso has no file.
{ ldd "$binary" || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' |
    while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
# The daemon's default state and socket directories, owned by its uid.
mkdir -p "$rootfs/tmp" "$rootfs/run/stigmer" "$rootfs/var/lib/stigmer/sandboxd"
chmod 1777 "$rootfs/tmp"
chown -R 10001:10001 "$rootfs/run/stigmer" "$rootfs/var/lib/stigmer"

docker build --quiet --tag "$image" "$context" >/dev/null
echo "build.sh: built $image from $binary"
