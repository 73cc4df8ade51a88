# What the cluster changes on the host, listed the same way by up.sh (baseline, before it changes
# anything), down.sh (to undo) and check-clean.sh (to prove it was undone). Sourced.
chains() { # iptables|ip6tables -> "table chain" lines of the KUBE-*/CNI-* chains
  local t
  # without the command no KUBE-*/CNI-* chain can have been made through it: none (up.sh checks for
  # the command, require_tools, before its baseline; down.sh and check-clean.sh run on hosts without it)
  command -v "$1" >/dev/null 2>&1 || return 0
  for t in filter nat mangle; do
    "$1" -w 5 -t "$t" -S 2>/dev/null | awk -v t="$t" '$1=="-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) {print t, $2}'
  done | LC_ALL=C sort
}
netns_list() { ls /var/run/netns 2>/dev/null | grep '^cni-' | LC_ALL=C sort || true; }
state_mounts() { awk -v s="$STATE" 'index($5, s"/")==1 || $5==s {print $5}' /proc/self/mountinfo | LC_ALL=C sort -r; }
# processes whose command line names the state dir (containerd, shims, kubelet...) or whose PID file is ours
state_pids() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -qF -- "$STATE/" && echo "${p#/proc/}"
  done
  return 0
}
# The commands up.sh, down.sh and check-clean.sh run; after apt_parts every one must be there.
HOST_TOOLS=(containerd containerd-shim-runc-v2 ctr runc iptables ip6tables umoci skopeo debootstrap docker-registry
            openssl curl mkfs.ext4 losetup mount umount mountpoint ip sysctl flock setsid truncate)
require_tools() {
  local missing=() t
  for t in "${HOST_TOOLS[@]}"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  [[ -x "$CNI_BIN/bridge" && -x "$CNI_BIN/host-local" ]] || missing+=("$CNI_BIN/{bridge,host-local}")
  (( ${#missing[@]} == 0 )) || die "missing on this host after the package install: ${missing[*]} (PATH=$PATH; apt log: ${APT_LOG:-none})"
}
snapshot_host() { # dir: what the cluster changes on the host, as it is now
  local b="$1"
  mkdir -p "$b"
  chains iptables > "$b/chains4"; chains ip6tables > "$b/chains6"
  netns_list > "$b/netns"
  sysctl -n net.ipv4.ip_forward > "$b/ip_forward"
  # up.sh reads it before the package install (a containerd package may start its own service)
  echo "${RUN_CONTAINERD_BEFORE:-$([[ -e /run/containerd ]] && echo yes || echo no)}" > "$b/run-containerd"
  touch "$b/.done"
}
baseline() {
  [[ -f "$STATE/baseline/.done" ]] || snapshot_host "$STATE/baseline"
}
