#!/usr/bin/env bash
# Installs sandboxd as a system service, in one command:
#
#   sudo systemd/install.sh
#
# It installs the binaries (sandboxd, sandboxctl) to $PREFIX/bin, the units,
# sysusers.d and tmpfiles.d files under $PREFIX/lib, the example config to
# /etc/stigmer/sandboxd.toml (an existing one is kept), then creates the
# group `stigmer` and the user `stigmer-sandbox`, the state and socket
# directories, reloads systemd and enables and starts sandboxd.socket. Run
# again to upgrade: the files are replaced and a running daemon restarted.
#
# Options and variables:
#   --bin-dir DIR  take the binaries from DIR (default: target/release of
#                  this checkout, built with cargo when missing)
#   --no-start     install files only; no users, directories or systemctl
#   --uninstall    stop and disable the units, remove what was installed;
#                  the config and the state directory are kept
#   DESTDIR        install into this folder (packaging, tests); implies
#                  --no-start, since nothing there is a running system
#   PREFIX         default /usr/local (units then go to
#                  /usr/local/lib/systemd/system, which systemd searches)
#   SYSCONFDIR     default /etc
set -euo pipefail

prefix="${PREFIX:-/usr/local}"
sysconfdir="${SYSCONFDIR:-/etc}"
destdir="${DESTDIR:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
bin_dir=""
start=1
action=install

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) [ $# -ge 2 ] || die "--bin-dir needs a directory"; bin_dir="$2"; shift 2 ;;
        --bin-dir=*) bin_dir="${1#*=}"; shift ;;
        --no-start) start=0; shift ;;
        --uninstall) action=uninstall; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[ -z "$destdir" ] || start=0
case "$prefix" in /*) ;; *) die "PREFIX '$prefix' must be an absolute path" ;; esac

bindir="$prefix/bin"
unitdir="$prefix/lib/systemd/system"
sysusersdir="$prefix/lib/sysusers.d"
tmpfilesdir="$prefix/lib/tmpfiles.d"
docdir="$prefix/share/doc/sandboxd"
confdir="$sysconfdir/stigmer"

systemd_running() { [ -d /run/systemd/system ]; }

if [ "$action" = uninstall ]; then
    if [ "$start" = 1 ] && systemd_running; then
        systemctl disable --now sandboxd.socket sandboxd.service || true
    fi
    for file in "$bindir/sandboxd" "$bindir/sandboxctl" "$unitdir/sandboxd.service" \
        "$unitdir/sandboxd.socket" "$sysusersdir/sandboxd.conf" "$tmpfilesdir/sandboxd.conf" \
        "$docdir/README.md" "$docdir/sandboxd.toml.example"; do
        rm -f "$destdir$file"
    done
    rmdir "$destdir$docdir" 2>/dev/null || true
    if [ "$start" = 1 ] && systemd_running; then systemctl daemon-reload; fi
    say "removed sandboxd; kept $confdir/sandboxd.toml, /var/lib/stigmer and the users"
    exit 0
fi

# The binaries: given, or this checkout's release build (built when missing).
if [ -z "$bin_dir" ]; then
    bin_dir="${CARGO_TARGET_DIR:-$repo/target}/release"
    if [ ! -x "$bin_dir/sandboxd" ] || [ ! -x "$bin_dir/sandboxctl" ]; then
        command -v cargo >/dev/null \
            || die "no binaries in $bin_dir and no cargo to build them: build with 'cargo build --release' or pass --bin-dir"
        say "building the release binaries"
        (cd "$repo" && cargo build --release --locked -p sandboxd -p sandboxd-client --bins)
    fi
fi
for binary in sandboxd sandboxctl; do
    [ -x "$bin_dir/$binary" ] || die "$bin_dir/$binary is missing or not executable"
done

# Files: binaries 0755, units and system config fragments 0644, the config
# 0640 (it names the uids that may call the daemon).
install -d -m 0755 "$destdir$bindir" "$destdir$unitdir" "$destdir$sysusersdir" \
    "$destdir$tmpfilesdir" "$destdir$docdir" "$destdir$confdir"
install -m 0755 "$bin_dir/sandboxd" "$destdir$bindir/sandboxd"
install -m 0755 "$bin_dir/sandboxctl" "$destdir$bindir/sandboxctl"
for unit in sandboxd.service sandboxd.socket; do
    # The units name the default paths; follow PREFIX and SYSCONFDIR.
    sed -e "s|/usr/local/bin/|$bindir/|g" -e "s|/usr/local/share/doc/|$prefix/share/doc/|g" \
        -e "s|/etc/stigmer/|$confdir/|g" \
        "$here/$unit" > "$destdir$unitdir/$unit.tmp"
    chmod 0644 "$destdir$unitdir/$unit.tmp"
    mv -f "$destdir$unitdir/$unit.tmp" "$destdir$unitdir/$unit"
done
install -m 0644 "$here/sysusers.conf" "$destdir$sysusersdir/sandboxd.conf"
install -m 0644 "$here/tmpfiles.conf" "$destdir$tmpfilesdir/sandboxd.conf"
install -m 0644 "$here/../README.md" "$destdir$docdir/README.md"
install -m 0644 "$here/sandboxd.toml" "$destdir$docdir/sandboxd.toml.example"
if [ -e "$destdir$confdir/sandboxd.toml" ]; then
    say "keeping the existing $confdir/sandboxd.toml (the new example is $docdir/sandboxd.toml.example)"
else
    install -m 0640 "$here/sandboxd.toml" "$destdir$confdir/sandboxd.toml"
fi
say "installed into ${destdir:-/} (prefix $prefix)"

if [ "$start" = 0 ]; then
    [ -n "$destdir" ] && say "DESTDIR set: users, directories and units are left for the target system"
    exit 0
fi

# The system: users and groups, directories, then systemd.
command -v systemd-sysusers >/dev/null || die "systemd-sysusers not found: is this a systemd host?"
systemd-sysusers "$sysusersdir/sandboxd.conf"
systemd-tmpfiles --create "$tmpfilesdir/sandboxd.conf"
if ! systemd_running; then
    say "systemd is not running here: start sandboxd by hand, or later run 'systemctl enable --now sandboxd.socket'"
    exit 0
fi
systemctl daemon-reload
systemctl enable --now sandboxd.socket
# An upgrade: a daemon that was running gets the new binary now.
systemctl try-restart sandboxd.service
say "sandboxd.socket is enabled and listening on /run/stigmer/sandboxd.sock"
say "give the control plane's user access: usermod -aG stigmer USER, and its uid in [access] of $confdir/sandboxd.toml"
