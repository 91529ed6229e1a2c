#!/usr/bin/env bash
# Installs gVisor's runsc (Debian's own package, in bookworm main) when it is
# missing, and registers it with the running docker engine as the runtime
# "runsc", for the docker tier's `[docker] runtime = "runsc"` test
# (tests/tests/docker/docker_gvisor.rs). The engine's other settings in
# /etc/docker/daemon.json are kept; dockerd reloads its runtimes on SIGHUP
# (20.10 does), so the engine and its containers keep running. Says why and
# leaves the engine alone when runsc cannot be had; the test then fails
# under CI=true, naming what is missing.
set -euo pipefail

config=/etc/docker/daemon.json

if ! command -v runsc >/dev/null 2>&1; then
  apt-get update -qq
  if apt-cache policy runsc | grep 'Candidate: [0-9]' >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc
  else
    echo "runsc: no installable candidate in the apt sources (apt-cache policy runsc); the gVisor test cannot run"
    exit 0
  fi
fi
# Read whole: `| head -n 1` would close the pipe early and, under
# pipefail, fail the script on runsc's SIGPIPE.
version=$(runsc --version)
echo "${version%%$'\n'*}"

if ! command -v jq >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq
fi

# --network=host: Debian's runsc (20221219) takes any network namespace
# that shows /proc/sys/net/core/rmem_default for the host's and refuses to
# start ("cannot run with network enabled in root network namespace"), and
# newer kernels (6.18 here) show it in every namespace; with it, gVisor hands the
# runner's sockets to the host kernel inside the container's own network
# namespace (docker's bridge, as under runc) instead of its own netstack.
# Not --oci-seccomp: this runsc answers every refused call of a profile
# with EPERM, whatever errno the profile names, so glibc's clone3 (ENOSYS
# in the daemon's profile, for its fallback to clone) fails and no thread
# starts; without it the profile is ignored, and `status` says so.
wanted=$(jq -cn --arg path "$(command -v runsc)" '{path: $path}')
if unshare -n test -e /proc/sys/net/core/rmem_default 2>/dev/null; then
  wanted=$(jq -c '. + {runtimeArgs: ["--network=host"]}' <<<"$wanted")
fi

registered() {
  docker info --format '{{json .Runtimes}}' | jq -e --argjson wanted "$wanted" '.runsc == $wanted' >/dev/null
}

if registered; then
  echo "runsc: already a runtime of the engine, as $wanted"
  exit 0
fi

# Merge, never replace: the engine's storage driver, MTU and log options
# live in the same file.
current='{}'
if [ -s "$config" ]; then
  current=$(cat "$config")
fi
mkdir -p "$(dirname "$config")"
if ! printf '%s' "$current" |
  jq --argjson wanted "$wanted" '.runtimes.runsc = $wanted' >"$config.sandboxd-new"; then
  rm -f "$config.sandboxd-new"
  echo "runsc: $config is not JSON jq can read; left as it is, runsc not registered"
  exit 0
fi
mv "$config.sandboxd-new" "$config"

pid=$(cat /var/run/docker.pid 2>/dev/null || true)
if [ -z "$pid" ] || ! kill -HUP "$pid"; then
  echo "runsc: written into $config, but no dockerd to reload (/var/run/docker.pid); it takes it at its next start"
  exit 0
fi
for _ in $(seq 1 30); do
  if registered; then
    echo "runsc: registered with the engine as $wanted (dockerd $pid reloaded on SIGHUP)"
    exit 0
  fi
  sleep 1
done
echo "runsc: dockerd $pid did not take the runtime on SIGHUP; its log may say why"
exit 0
