#!/usr/bin/env bash
# Checks sandboxd's systemd files as systemd/install.sh installs them:
#   - systemd-analyze verify on sandboxd.socket and sandboxd.service (any
#     complaint fails the check, warnings included);
#   - systemd-analyze security --offline=true on sandboxd.service: prints
#     the exposure score and every item that counts against it, and fails
#     above the threshold;
#   - the sysusers.d and tmpfiles.d files, applied to a scratch root.
#
# Usage: .ci/check-units.sh [BIN_DIR]
#   BIN_DIR holds the built sandboxd and sandboxctl (default:
#   ${CARGO_TARGET_DIR:-./target}/debug); verify needs ExecStart= to exist.
#   SANDBOXD_MAX_EXPOSURE: the highest acceptable score (default 4.5).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${1:-${CARGO_TARGET_DIR:-$root/target}/debug}"
max="${SANDBOXD_MAX_EXPOSURE:-4.5}"

command -v systemd-analyze >/dev/null || { echo "check-units: systemd-analyze not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Installed with every path inside the scratch folder, so ExecStart= names
# a real file and the check sees exactly what a host gets.
PREFIX="$tmp/usr/local" SYSCONFDIR="$tmp/etc" \
    "$root/systemd/install.sh" --no-start --bin-dir "$bin_dir" >/dev/null
units="$tmp/usr/local/lib/systemd/system"

echo "check-units: systemd-analyze verify"
complaints="$(systemd-analyze verify "$units/sandboxd.socket" "$units/sandboxd.service" 2>&1)" || {
    echo "$complaints" >&2
    exit 1
}
if [ -n "$complaints" ]; then
    echo "$complaints" >&2
    echo "check-units: systemd-analyze verify complained" >&2
    exit 1
fi

echo "check-units: systemd-analyze security (threshold $max)"
threshold="$(awk -v max="$max" 'BEGIN { printf "%d", max * 10 + 0.5 }')"
status=0
report="$(systemd-analyze security --offline=true --threshold="$threshold" \
    "$units/sandboxd.service" 2>&1)" || status=$?
score="$(printf '%s\n' "$report" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
[ -n "$score" ] || { echo "$report" >&2; echo "check-units: no exposure score in the report" >&2; exit 1; }
echo "check-units: what counts against sandboxd.service:"
printf '%s\n' "$report" | grep '✗' | sed 's/  */ /g; s/^/  /'
echo "check-units: exposure score of sandboxd.service: $score (threshold $max)"
if [ "$status" -ne 0 ]; then
    echo "check-units: the exposure score $score is above $max" >&2
    exit 1
fi

echo "check-units: sysusers.d and tmpfiles.d on a scratch root"
mkdir -p "$tmp/root/etc"
systemd-sysusers --root="$tmp/root" "$tmp/usr/local/lib/sysusers.d/sandboxd.conf" 2>&1 | sed 's/^/  /'
grep -q '^stigmer:' "$tmp/root/etc/group" || { echo "check-units: no group stigmer" >&2; exit 1; }
grep -q '^stigmer-sandbox:' "$tmp/root/etc/passwd" || { echo "check-units: no user stigmer-sandbox" >&2; exit 1; }
members="$(awk -F: '$1 == "stigmer" { print $4 }' "$tmp/root/etc/group")"
case ",$members," in
    *,stigmer-sandbox,*) echo "check-units: stigmer-sandbox must not be in group stigmer" >&2; exit 1 ;;
esac
systemd-tmpfiles --root="$tmp/root" --create "$tmp/usr/local/lib/tmpfiles.d/sandboxd.conf"
for dir in run/stigmer:750 var/lib/stigmer:711 var/lib/stigmer/sandboxd:711; do
    mode="$(stat -c %a "$tmp/root/${dir%%:*}")"
    [ "$mode" = "${dir##*:}" ] || { echo "check-units: /${dir%%:*} has mode $mode, not ${dir##*:}" >&2; exit 1; }
done
echo "check-units: ok"
