#!/usr/bin/env bash
# Exit 0 when nothing of the cluster of tools/cluster/up.sh is left on the host: no process naming
# its state dir, no mount under it, no state dir, no bridge, no KUBE-*/CNI-* chain that was not
# there before up.sh (iptables and ip6tables), net.ipv4.ip_forward as before, no cni- netns.
# Otherwise print each leftover and exit 1. Run by down.sh and by CI after it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$CLUSTER_SRC/hostcheck.sh"
bad=0
fail() { echo "check-clean: LEFT OVER: $*" >&2; bad=1; }
for pid in $(state_pids); do fail "process $pid: $(tr '\0' ' ' < /proc/$pid/cmdline | cut -c1-160)"; done
for m in $(state_mounts); do fail "mount $m"; done
[[ -e "$STATE" ]] && fail "state dir $STATE"
[[ -e "$STATE_IMG" ]] && fail "state image $STATE_IMG"
for l in $(losetup -j "$STATE_IMG" -O NAME -n 2>/dev/null); do fail "loop device $l"; done
ip link show "$BRIDGE" >/dev/null 2>&1 && fail "bridge $BRIDGE"
for v in 4 6; do
  cmd=iptables; [[ $v == 6 ]] && cmd=ip6tables
  base="$BASELINE_COPY/chains$v"; [[ -f "$base" ]] || base=/dev/null
  while read -r t c; do [[ -n "$t" ]] && fail "$cmd -t $t chain $c"; done < <(comm -13 "$base" <(chains "$cmd"))
done
if [[ -f "$BASELINE_COPY/ip_forward" ]]; then
  [[ "$(sysctl -n net.ipv4.ip_forward)" == "$(cat "$BASELINE_COPY/ip_forward")" ]] || fail "net.ipv4.ip_forward=$(sysctl -n net.ipv4.ip_forward)"
fi
for ns in $(netns_list); do fail "netns $ns"; done
[[ -e "$REPO/.cluster/env" ]] && fail "$REPO/.cluster/env"
(( bad )) && exit 1
echo "check-clean: nothing of the cluster is left" >&2
