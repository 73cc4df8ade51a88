#!/usr/bin/env bash
# The cluster harness on a host that lacks its parts (this machine kind's image has no iptables,
# containerd or docker-registry), checked without removing anything from the host: up.sh runs with
# a PATH from which those commands are hidden, a state dir of its own, and apt-get / dpkg-query /
# go replaced by shims. Three cases:
#   1. the packages cannot be installed  -> exit 1 naming the apt-get install that failed, nothing mounted
#   2. installed but commands missing    -> exit 1, one sentence naming every missing command
#   3. a failure after the state file system is mounted and the baseline taken (the Go build fails)
#      -> exit != 0 with the cause; then down.sh removes the mount, loop device and image, and
#      check-clean.sh passes
# Never exit 127, never silent. Run by tools/setup-and-test.sh before the real up.sh (it refuses to
# run while the real cluster is up: check-clean.sh would see that cluster's bridge). Needs root.
set -euo pipefail
CLUSTER_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $(id -u) == 0 ]] || { echo "test-fresh-host: needs root" >&2; exit 1; }
if ip link show nbv0 >/dev/null 2>&1; then
  echo "test-fresh-host: the real cluster is up (bridge nbv0); run tools/cluster/down.sh first" >&2; exit 1
fi
T="$(mktemp -d /var/tmp/nbv-fresh-host.XXXXXX)"
export NBV_CLUSTER_STATE="$T/state" NBV_CLUSTER_CACHE="$T/cache" NBV_TESTBIN="$T/testbin"
HIDDEN=' iptables ip6tables iptables-legacy ip6tables-legacy iptables-nft ip6tables-nft containerd containerd-shim-runc-v2 ctr runc docker-registry umoci skopeo debootstrap apt-get dpkg-query go '
bad=0
fail() { echo "test-fresh-host: FAIL: $*" >&2; bad=1; }
cleanup() { umount "$NBV_CLUSTER_STATE" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT

# a bin dir holding every command of PATH but the hidden ones (first on PATH wins, as for a shell)
mkbin() { # dir
  local d="$1" dir f n; mkdir -p "$d"
  IFS=: read -ra dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do
    [[ -d "$dir" ]] || continue
    for f in "$dir"/*; do
      n="${f##*/}"
      [[ -x "$f" && ! -d "$f" && "$HIDDEN" != *" $n "* && ! -e "$d/$n" ]] && ln -s "$f" "$d/$n"
    done
  done
  return 0
}
shim() { printf '#!/bin/sh\n%s\n' "$2" > "$1"; chmod +x "$1"; }
run_up() { # case-name bin-dir -> sets RC, ERR
  local out="$T/$1.err"
  set +e; env PATH="$2" bash "$CLUSTER_SRC/up.sh" >/dev/null 2>"$out"; RC=$?; set -e
  ERR="$(cat "$out")"
  echo "--- case $1: exit $RC; stderr ends:"; tail -n 3 "$out" | sed 's/^/    /'
  (( RC != 127 )) || fail "$1: exit 127 (a command not found, unexplained)"
  (( RC != 0 )) || fail "$1: up.sh succeeded without its parts"
  [[ -n "$ERR" ]] || fail "$1: nothing on stderr"
}
nothing_left() { # case-name
  mountpoint -q "$NBV_CLUSTER_STATE" 2>/dev/null && fail "$1: $NBV_CLUSTER_STATE is mounted"
  [[ -e "$NBV_CLUSTER_STATE.img" ]] && fail "$1: $NBV_CLUSTER_STATE.img was made"
  return 0
}

# 1. apt-get cannot install the packages
B1="$T/bin1"; mkbin "$B1"
shim "$B1/dpkg-query" 'exit 1'                       # nothing installed
shim "$B1/apt-get" 'echo "E: Failed to fetch (test-fresh-host: no network)" >&2; exit 100'
run_up apt-fails "$B1"
[[ "$ERR" == *"apt-get install"*"iptables"*"failed"* ]] || fail "apt-fails: the message does not name the failed install"
nothing_left apt-fails

# 2. the packages say installed, but their commands are not on PATH
B2="$T/bin2"; mkbin "$B2"
shim "$B2/dpkg-query" "echo 'install ok installed'"
run_up commands-missing "$B2"
line="$(grep 'missing on this host' <<<"$ERR" || true)"
[[ $(grep -c . <<<"$line") == 1 ]] || fail "commands-missing: not one sentence naming the missing commands"
for c in iptables ip6tables containerd ctr runc docker-registry umoci skopeo; do
  [[ " $line " == *" $c "* ]] || fail "commands-missing: '$c' is not named"
done
nothing_left commands-missing

# 3. every command there (stubs for the hidden ones), the Go build fails after mount + baseline
B3="$T/bin3"; mkbin "$B3"
shim "$B3/dpkg-query" "echo 'install ok installed'"
for c in $HIDDEN; do [[ -e "$B3/$c" ]] || shim "$B3/$c" 'exit 0'; done
shim "$B3/go" 'echo "go: test-fresh-host: the Go build fails" >&2; exit 1'
mkdir -p "$T/cni"; for c in bridge host-local; do shim "$T/cni/$c" 'exit 0'; done
if [[ ! -x /usr/lib/cni/bridge || ! -x /usr/lib/cni/host-local ]]; then
  export NBV_CNI_BIN="$T/cni"
fi
GO="$B3/go" run_up build-fails "$B3"
mountpoint -q "$NBV_CLUSTER_STATE" || fail "build-fails: up.sh failed before it mounted the state dir (this case tests down.sh after a mount)"
[[ -f "$NBV_CLUSTER_STATE/baseline/.done" ]] || fail "build-fails: no baseline was taken before the failure"
set +e; env PATH="$B3" bash "$CLUSTER_SRC/down.sh" >"$T/down.out" 2>&1; rc=$?; set -e
echo "--- down.sh after the failed up.sh: exit $rc"; tail -n 3 "$T/down.out" | sed 's/^/    /'
(( rc == 0 )) || fail "down.sh after a failed up.sh: exit $rc"
nothing_left down
[[ -e "$NBV_CLUSTER_STATE" ]] && fail "down: state dir left"
losetup -j "$NBV_CLUSTER_STATE.img" -O NAME -n 2>/dev/null | grep -q . && fail "down: loop device left"
env PATH="$B3" bash "$CLUSTER_SRC/check-clean.sh" || fail "check-clean.sh after down.sh"

(( bad == 0 )) || exit 1
echo "test-fresh-host: up.sh on a host without its parts fails with the cause; down.sh cleans after it"
