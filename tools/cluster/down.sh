#!/usr/bin/env bash
# Tear down what tools/cluster/up.sh made, and only that: delete the Pods (so the CNI plugin
# removes their network), stop the processes it started (by their PID files, containerd's shims
# by their --address, which names this state dir), unmount everything under the state dir, delete
# the bridge, remove the iptables/ip6tables chains that were not there before up.sh (the CNI NAT
# chains, the kubelet's KUBE-FIREWALL / KUBE-KUBELET-CANARY / KUBE-IPTABLES-HINT), restore
# net.ipv4.ip_forward, then delete the state dir and .cluster/env. Ends with check-clean.sh:
# exit != 0 when anything is left. Safe to run twice.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$CLUSTER_SRC/hostcheck.sh"
main() {  # the whole script is parsed before it runs (safe to edit while it runs)
[[ $(id -u) == 0 ]] || die "down.sh needs root"
T0=$SECONDS
[[ -d "$STATE" || -e "$STATE_IMG" ]] || { log "nothing to tear down ($STATE absent)"; rm -f "$REPO/.cluster/env"; exec bash "$CLUSTER_SRC/check-clean.sh"; }
# the host as it was before up.sh; kept outside the state file system, which goes away
B=$BASELINE_COPY
if [[ -f "$STATE/baseline/.done" ]]; then rm -rf "$B"; cp -r "$STATE/baseline" "$B"; fi
if [[ ! -f "$B/.done" ]]; then
  # up.sh takes the baseline before it starts any process or touches the network, so a state dir
  # without one is an up.sh that stopped early (a failed package install, mkfs, mount): nothing of
  # the host's network to restore; the mounts, loop image and state dir below are still removed.
  if compgen -G "$RUN/*.pid" >/dev/null || [[ -n "$(state_pids)" ]]; then
    log "WARNING: no baseline of the host ($STATE/baseline) but processes of the cluster: the network is compared with the host as it is now"
  else
    log "no baseline of the host ($STATE/baseline): up.sh stopped before it changed the host; removing its files"
  fi
  rm -rf "$B"; snapshot_host "$B"
fi

stop_pidfiles() { # name...: SIGTERM to each at once, then wait up to 20 s for all, SIGKILL the rest
  # (each takes about 2 s to exit; one after the other, the five took 11 s of every teardown)
  local name pid n=0 names=() pids=()
  for name in "$@"; do
    [[ -f "$RUN/$name.pid" ]] || continue
    pid="$(cat "$RUN/$name.pid")"
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; names+=("$name"); pids+=("$pid"); fi
  done
  while (( n < 200 )) && [[ ${#pids[@]} -gt 0 ]] && kill -0 "${pids[@]}" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
  for n in "${!pids[@]}"; do
    kill -0 "${pids[$n]}" 2>/dev/null || continue
    log "${names[$n]} (${pids[$n]}) ignored SIGTERM: SIGKILL"; kill -KILL "${pids[$n]}" 2>/dev/null || true; sleep 0.2
  done
  for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

# 1. Pods first, while kubelet + containerd run: the kubelet stops each sandbox and the bridge
#    plugin removes its veth, IP and NAT chain.
if pid_alive kube-apiserver && pid_alive kubelet; then
  kc delete jobs --all -A --wait=false >/dev/null 2>&1 || true
  stop_pidfiles kube-controller-manager   # no controller re-creates anything now
  kc delete pods --all -A --grace-period=2 --wait=false >/dev/null 2>&1 || true
  n=0
  while (( n < 60 )) && [[ -n "$(kc get pods -A -o name 2>/dev/null)" ]]; do sleep 0.5; n=$((n + 1)); done
  # the pods are gone from the API; wait for the kubelet to stop their sandboxes (netns removed)
  n=0
  while (( n < 60 )) && [[ -n "$(comm -13 "$B/netns" <(netns_list))" ]]; do sleep 0.5; n=$((n + 1)); done
fi

log "pods deleted ($((SECONDS - T0)) s)"
# 2. processes: the Kubernetes ones together, then what they stood on (etcd, containerd) together
stop_pidfiles kube-controller-manager kube-scheduler kubelet kube-apiserver
# containers still running (none normally): kill their tasks through containerd, then stop it
if pid_alive containerd; then
  for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$c" >/dev/null 2>&1 || true; done
fi
stop_pidfiles etcd containerd
log "processes stopped ($((SECONDS - T0)) s)"
# containerd-shim-runc-v2 processes of THIS containerd (their command line has -address $CTR_SOCK)
for pid in $(state_pids); do
  log "stopping leftover process $pid: $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-120)"
  pkill -KILL -P "$pid" 2>/dev/null || true   # a shim's container processes (children), then the shim
  kill -KILL "$pid" 2>/dev/null || true
done
sleep 0.3

# 3. network namespaces the CNI made (not there before up.sh), mounts under the state dir
for ns in $(comm -13 "$B/netns" <(netns_list)); do
  umount "/var/run/netns/$ns" 2>/dev/null || umount -l "/var/run/netns/$ns" 2>/dev/null || true
  rm -f "/var/run/netns/$ns"
done
for m in $(state_mounts); do
  [[ "$m" == "$STATE" ]] && continue   # the state file system itself: last
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
done

# 4. bridge, iptables chains, ip_forward
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
unchain() { # iptables|ip6tables baseline-file
  local cmd="$1" t c rule
  comm -13 "$2" <(chains "$cmd") > "$STATE/chains.new"
  # rules in any chain that jump to a new chain, then the chains themselves
  while read -r t c; do
    "$cmd" -w 5 -t "$t" -S | awk -v c="$c" '$1=="-A" && $2!=c {for (i=3;i<=NF;i++) if (($i=="-j"||$i=="-g") && $(i+1)==c) {print; break}}' \
      | while read -r rule; do eval "$cmd -w 5 -t $t ${rule/-A /-D }" || true; done
  done < "$STATE/chains.new"
  while read -r t c; do "$cmd" -w 5 -t "$t" -F "$c" 2>/dev/null || true; done < "$STATE/chains.new"
  while read -r t c; do "$cmd" -w 5 -t "$t" -X "$c" 2>/dev/null || log "cannot delete $cmd -t $t $c"; done < "$STATE/chains.new"
}
unchain iptables "$B/chains4"
unchain ip6tables "$B/chains6"
sysctl -qw net.ipv4.ip_forward="$(cat "$B/ip_forward")"
if [[ "$(cat "$B/run-containerd")" == no && -d /run/containerd ]]; then rm -rf /run/containerd; fi

# 5. the state file system (one file: fast to delete), env; then prove it
if mountpoint -q "$STATE"; then
  umount "$STATE" 2>/dev/null || { sleep 1; umount "$STATE"; } || die "cannot unmount $STATE"
fi
for l in $(losetup -j "$STATE_IMG" -O NAME -n 2>/dev/null); do losetup -d "$l" 2>/dev/null || log "cannot detach $l"; done
rm -f "$STATE_IMG"
rmdir "$STATE" 2>/dev/null || rm -rf "$STATE"
rm -f "$REPO/.cluster/env"; rmdir "$REPO/.cluster" 2>/dev/null || true
log "cluster down in $((SECONDS - T0)) s"
echo "down $((SECONDS - T0))" > /tmp/.nbv-cluster-down-time
exec bash "$CLUSTER_SRC/check-clean.sh"
}
main "$@"
