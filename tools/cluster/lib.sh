# Shared settings of tools/cluster/{up,down,runner-image}.sh (sourced, not run).
# One cluster per machine: fixed state dir, bridge, subnet and loopback ports.
set -euo pipefail
CLUSTER_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$CLUSTER_SRC/../.." && pwd)"
K8S_VERSION=1.35.4
KANIKO_VERSION=v1.24.0
SUITE=bookworm
CACHE="${NBV_CLUSTER_CACHE:-$HOME/.cache/nbv-cluster}"          # images, pause binary (kept)
TESTBIN="${NBV_TESTBIN:-$HOME/.cache/nbv-testbin}/$K8S_VERSION"    # Go-built binaries (kept)
STATE="${NBV_CLUSTER_STATE:-/var/tmp/nbv-node}"                   # everything the running cluster owns
# ...on an ext4 file system of its own (a sparse loop image, mounted without discard): the host's root
# is mounted with `discard`, where deleting the containerd and registry files of a test run took >10 min
STATE_IMG="$STATE.img"
BASELINE_COPY="$STATE.baseline"   # down.sh's copy of $STATE/baseline, outside the file system it unmounts
STATE_IMG_SIZE=60G
CNI_BIN="${NBV_CNI_BIN:-/usr/lib/cni}"                            # the CNI plugins (Debian's containernetworking-plugins)
RUN="$STATE/run"                                                 # PID files, one per process
LOGS="$STATE/logs"
BRIDGE=nbv0
POD_CIDR=10.244.77.0/24
BRIDGE_IP=10.244.77.1
SERVICE_CIDR=10.0.0.0/24
ETCD_PORT=23790
ETCD_PEER_PORT=23791
APISERVER_PORT=16443
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
KCM_PORT=10257
SCHED_PORT=10259
NAMESPACE=nbv
SYSTEM_NS=nbv-system
CTR_SOCK="$STATE/containerd/containerd.sock"
PAUSE_REF=registry.k8s.io/pause:3.10
KANIKO_REF=nbv.local/kaniko-executor:$KANIKO_VERSION
VENVS_REF=nbv.local/base:venvs          # the base image in containerd (the registry Pod runs on it)
KUBECTL="$TESTBIN/kubectl"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'tools/cluster: ERROR: %s\n' "$*" >&2; exit 1; }
ctr_() { ctr --address "$CTR_SOCK" -n k8s.io "$@"; }
kc() { "$KUBECTL" --kubeconfig "$STATE/pki/admin.kubeconfig" "$@"; }
pid_alive() { local f="$RUN/$1.pid"; [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null; }
RUNNER_SITE=/opt/nbv-runner/lib/python3.11/site-packages   # bookworm's python3 is 3.11
