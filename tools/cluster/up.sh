#!/usr/bin/env bash
# Bring up a real single-node Kubernetes on this machine, from nothing, idempotently:
#   containerd + runc + CNI plugins + iptables + umoci + skopeo + debootstrap + docker-registry (apt),
#   etcd, kube-apiserver, kubectl (tools/testbin/build.sh), kubelet, kube-controller-manager,
#   kube-scheduler, kaniko (tools/testbin/build-node.sh), the pause / kaniko / base images
#   (tools/cluster/images.sh), a registry Pod, the namespace, CRD and server Role, and the runner
#   image of this checkout (tools/cluster/runner-image.sh). Writes .cluster/env at the repo root.
# Binaries and images are cached (~/.cache/nbv-testbin, ~/.cache/nbv-cluster); everything the running
# cluster owns lives under $STATE (/var/tmp/nbv-node, a loop-mounted ext4 image); tools/cluster/down.sh undoes it all.
# A part that cannot be made is an error (exit != 0), never skipped. Needs root.
# Prints one "part seconds" line per part on stderr (timings for docs/benchmarks.md).
#   tools/cluster/up.sh --prepare   only the parts that need neither Go nor the host's state: the
#                                   Debian packages and the images built without Go (venvs: debootstrap,
#                                   pip), cached for the next up.sh; nothing is mounted, started or
#                                   changed on the host's network (tools/setup-and-test.sh runs it in the
#                                   background while the Go builds run)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$CLUSTER_SRC/pki.sh"
source "$CLUSTER_SRC/hostcheck.sh"
main() {  # the whole script is parsed before it runs (safe to edit while it runs)
local prepare=no
case "${1:-}" in
  --prepare) prepare=yes ;;
  "") ;;
  *) die "up.sh: unknown argument: $1 (only --prepare)" ;;
esac
[[ $(id -u) == 0 ]] || die "up.sh needs root (containerd, mounts, a bridge, iptables)"
T_ALL=$SECONDS
declare -a TIMES=()
part() { local name="$1" t0=$SECONDS; shift; "$@"; TIMES+=("$name $((SECONDS - t0))"); log "part $name: $((SECONDS - t0)) s"; }

mkdir -p "$CACHE"
# ---- packages first, then the tools they give: nothing of the host is read or changed before both
# (the baseline below lists iptables chains, which needs iptables: a fresh host has none)
APT_LOG="$CACHE/apt.log"
# (a --prepare run before this one saw the host before its own apt-get: that observation holds)
BEFORE_FILE="$CACHE/.run-containerd-before"
if [[ ! -f "$STATE/baseline/.done" ]]; then
  if [[ -f "$BEFORE_FILE" ]]; then RUN_CONTAINERD_BEFORE="$(cat "$BEFORE_FILE")"
  elif [[ -e /run/containerd ]]; then RUN_CONTAINERD_BEFORE=yes; else RUN_CONTAINERD_BEFORE=no; fi
  [[ $prepare == no ]] || echo "$RUN_CONTAINERD_BEFORE" > "$BEFORE_FILE"
fi
DEBS=(containerd runc containernetworking-plugins iptables umoci skopeo debootstrap docker-registry openssl curl e2fsprogs util-linux)
apt_parts() {
  local missing=() p
  for p in "${DEBS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  (( ${#missing[@]} )) || return 0
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$APT_LOG" 2>&1 || {
    apt-get update -q >>"$APT_LOG" 2>&1 || true   # a failed update shows in the install below
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$APT_LOG" 2>&1 \
      || { tail -20 "$APT_LOG" >&2; die "apt-get install ${missing[*]} failed"; }
  }
}
part apt apt_parts
part tools require_tools   # every missing command named in one sentence (hostcheck.sh)
if [[ $prepare == yes ]]; then
  part image-venvs bash "$CLUSTER_SRC/images.sh" venvs
  printf 'TIMES %s\n' "${TIMES[@]}" >&2
  return 0
fi

mkdir -p "$STATE"
if ! mountpoint -q "$STATE"; then
  [[ -z "$(ls -A "$STATE")" ]] || die "$STATE is not empty and not the cluster's file system (run tools/cluster/down.sh)"
  truncate -s "$STATE_IMG_SIZE" "$STATE_IMG"
  mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$STATE_IMG"
  mount -o loop,nodiscard "$STATE_IMG" "$STATE"
fi
mkdir -p "$RUN" "$LOGS"
exec 7>"$RUN/up.lock"; flock 7   # (the daemons below do not inherit fd 7: start_bg closes it)
baseline   # what the host looked like before: down.sh restores exactly that
rm -f "$BEFORE_FILE"

# ---- packages, binaries, images ---------------------------------------------------------
part build-etcd-apiserver-kubectl bash "$REPO/tools/testbin/build.sh" >/dev/null
for b in kubelet kube-controller-manager kube-scheduler kaniko-executor; do
  part "build-$b" bash "$REPO/tools/testbin/build-node.sh" "$b" >/dev/null
done
for i in pause kaniko venvs; do part "image-$i" bash "$CLUSTER_SRC/images.sh" "$i"; done

# ---- host network: bridge subnet only --------------------------------------------------------
host_net() {
  mkdir -p "$STATE/cni/conf" "$STATE/cni/state"
  local conf="$STATE/cni/conf/10-nbv.conflist"
  [[ -f "$conf" ]] && return 0
  cat > "$conf.tmp" <<JSON
{"cniVersion": "1.0.0", "name": "nbv",
 "plugins": [{"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
                       "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/state"}}]}
JSON
  mv "$conf.tmp" "$conf"   # renamed in: containerd reloads on every file event
}
part network host_net

# ---- containerd ---------------------------------------------------------------------------------
start_bg() { # name logfile cmd...  (records the PID; no-op when it runs)
  local name="$1" logf="$2"; shift 2
  if pid_alive "$name"; then return 0; fi
  setsid "$@" >>"$logf" 2>&1 < /dev/null 7>&- 8>&- 9>&- &
  echo $! > "$RUN/$name.pid"
}
wait_for() { # what seconds cmd...
  local what="$1" budget="$2"; shift 2; local t0=$SECONDS
  local proc="${what%% *}"
  until "$@" >/dev/null 2>&1; do
    if [[ -f "$RUN/$proc.pid" ]] && ! pid_alive "$proc"; then
      tail -n 30 "$LOGS/$proc.log" >&2 || true
      die "$proc exited (log: $LOGS/$proc.log)"
    fi
    (( SECONDS - t0 < budget )) || die "$what not ready after ${budget} s (logs: $LOGS)"
    sleep 0.3
  done
}
containerd_up() {
  mkdir -p "$STATE/containerd/root" "$STATE/containerd/state" "$STATE/containerd/certs.d"
  cat > "$STATE/containerd/config.toml" <<TOML
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_REF"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/containerd/certs.d"
TOML
  start_bg containerd "$LOGS/containerd.log" containerd --config "$STATE/containerd/config.toml"
  wait_for containerd 60 ctr --address "$CTR_SOCK" version
  local i ref
  for i in pause kaniko venvs; do
    case $i in pause) ref=$PAUSE_REF ;; kaniko) ref=$KANIKO_REF ;; venvs) ref=$VENVS_REF ;; esac
    # import when the cached tar is newer than what containerd holds (stamp = tar's mtime)
    local st="$STATE/containerd/.import-$i" want; want="$(stat -c %Y "$CACHE/tars/$i.tar")"
    if [[ ! -f "$st" || "$(cat "$st")" != "$want" ]] || ! ctr_ images ls -q | grep -qx "$ref"; then
      ctr_ images import "$CACHE/tars/$i.tar" >/dev/null
      echo "$want" > "$st"
    fi
  done
}
part containerd containerd_up

# ---- control plane --------------------------------------------------------------------------------
part pki pki
P="$STATE/pki"
control_plane() {
  mkdir -p "$STATE/etcd"
  start_bg etcd "$LOGS/etcd.log" "$TESTBIN/etcd" --name=nbv --data-dir="$STATE/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="nbv=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync=true --log-level=warn
  wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  start_bg kube-apiserver "$LOGS/kube-apiserver.log" "$TESTBIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --secure-port="$APISERVER_PORT" --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 --cert-dir="$STATE/apiserver-certs" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --authorization-mode=Node,RBAC --allow-privileged=true --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" --service-account-key-file="$P/sa.pub" \
    --service-account-signing-key-file="$P/sa.key" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=Hostname,InternalIP --endpoint-reconciler-type=none --v=1
  wait_for kube-apiserver 180 curl -fsS --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz"
  start_bg kube-controller-manager "$LOGS/kube-controller-manager.log" "$TESTBIN/kube-controller-manager" \
    --kubeconfig="$P/kcm.kubeconfig" --authentication-kubeconfig="$P/kcm.kubeconfig" \
    --authorization-kubeconfig="$P/kcm.kubeconfig" --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --leader-elect=false --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --use-service-account-credentials=false --v=1
  start_bg kube-scheduler "$LOGS/kube-scheduler.log" "$TESTBIN/kube-scheduler" \
    --kubeconfig="$P/scheduler.kubeconfig" --authentication-kubeconfig="$P/scheduler.kubeconfig" \
    --authorization-kubeconfig="$P/scheduler.kubeconfig" --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --leader-elect=false --v=1
  wait_for kube-controller-manager 120 curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-scheduler 120 curl -fsSk "https://127.0.0.1:$SCHED_PORT/healthz"
}
part control-plane control_plane

kubelet_up() {
  mkdir -p "$STATE/kubelet" "$LOGS/pods"
  cat > "$STATE/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://$CTR_SOCK
podLogsDir: $LOGS/pods
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: AlwaysAllow}
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 200
protectKernelDefaults: false
YAML
  start_bg kubelet "$LOGS/kubelet.log" "$TESTBIN/kubelet" --config="$STATE/kubelet-config.yaml" \
    --kubeconfig="$P/kubelet.kubeconfig" --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override=localhost --v=1
  wait_for "kubelet (node localhost Ready)" 120 bash -c \
    "'$KUBECTL' --kubeconfig '$P/admin.kubeconfig' get node localhost -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
}
part kubelet-start kubelet_up

# ---- namespaces, CRD, Role, registry -----------------------------------------------------------------
objects() {
  kc get ns "$NAMESPACE" >/dev/null 2>&1 || kc create ns "$NAMESPACE" >/dev/null
  kc get ns "$SYSTEM_NS" >/dev/null 2>&1 || kc create ns "$SYSTEM_NS" >/dev/null
  kc apply -f "$REPO/jupyter_nbvalidation/backends/kubernetes/manifests/crd.yaml" >/dev/null
  kc apply -f "$REPO/jupyter_nbvalidation/backends/kubernetes/manifests/schedule-crd.yaml" >/dev/null
  kc wait --for=condition=Established crd/notebookvalidationjobs.nbvalidation.dev crd/notebookvalidationschedules.nbvalidation.dev --timeout=60s >/dev/null
  wait_for "default ServiceAccount in $NAMESPACE" 60 "$KUBECTL" --kubeconfig "$P/admin.kubeconfig" -n "$NAMESPACE" get sa default
  wait_for "default ServiceAccount in $SYSTEM_NS" 60 "$KUBECTL" --kubeconfig "$P/admin.kubeconfig" -n "$SYSTEM_NS" get sa default
}
part objects objects

registry() {
  mkdir -p "$STATE/registry/data"
  cat > "$STATE/registry/config.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: /var/lib/registry}
  delete: {enabled: true}
http: {addr: ":5000"}
YAML
  if ! kc -n "$SYSTEM_NS" get pod registry >/dev/null 2>&1; then
    kc -n "$SYSTEM_NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: registry, labels: {app: registry}}
spec:
  nodeName: localhost
  automountServiceAccountToken: false
  containers:
  - name: registry
    image: $VENVS_REF
    imagePullPolicy: Never
    command: [/usr/bin/docker-registry, serve, /etc/docker/registry/config.yml]
    volumeMounts:
    - {name: bin, mountPath: /usr/bin/docker-registry, readOnly: true}
    - {name: config, mountPath: /etc/docker/registry/config.yml, readOnly: true}
    - {name: data, mountPath: /var/lib/registry}
    readinessProbe: {httpGet: {path: /v2/, port: 5000}, periodSeconds: 1}
  volumes:
  - {name: bin, hostPath: {path: /usr/bin/docker-registry, type: File}}
  - {name: config, hostPath: {path: $STATE/registry/config.yml, type: File}}
  - {name: data, hostPath: {path: $STATE/registry/data, type: DirectoryOrCreate}}
YAML
  fi
  kc -n "$SYSTEM_NS" wait --for=condition=Ready pod/registry --timeout=120s >/dev/null \
    || { kc -n "$SYSTEM_NS" describe pod registry >&2; die "the registry Pod is not Ready"; }
  REG_IP="$(kc -n "$SYSTEM_NS" get pod registry -o jsonpath='{.status.podIP}')"
  [[ "$REG_IP" =~ ^10\.244\.77\. ]] || die "registry Pod IP '$REG_IP' is not on $POD_CIDR"
  REG_HOST="$REG_IP:5000"
  mkdir -p "$STATE/containerd/certs.d/$REG_HOST"
  cat > "$STATE/containerd/certs.d/$REG_HOST/hosts.toml" <<TOML
server = "http://$REG_HOST"
[host."http://$REG_HOST"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
TOML
  wait_for "registry at $REG_HOST" 30 curl -fsS "http://$REG_HOST/v2/"
}
part registry registry

write_env() {
  mkdir -p "$REPO/.cluster"
  cat > "$REPO/.cluster/env.tmp" <<ENV
# written by tools/cluster/up.sh $(date -u +%Y-%m-%dT%H:%M:%SZ); source with: set -a; . .cluster/env; set +a
KUBECONFIG=$P/admin.kubeconfig
NBV_NAMESPACE=$NAMESPACE
NBV_REGISTRY=$REG_HOST/nbv
NBV_REGISTRY_HOST=$REG_HOST
NBV_BUILDER_IMAGE=$KANIKO_REF
NBV_BUILDER_ARGS=["--insecure","--insecure-pull","--log-format=text"]
NBV_RUN_AS_USER=1000
NBV_KUBECTL=$KUBECTL
NBV_CLUSTER_STATE=$STATE
ENV
  # keep the runner image line until runner-image.sh replaces it (readers never see it missing)
  [[ -f "$REPO/.cluster/env" ]] && grep -e '^NBV_BASE_IMAGE=' -e '^NBV_RUNNER_IMAGE=' "$REPO/.cluster/env" >> "$REPO/.cluster/env.tmp" || true
  mv "$REPO/.cluster/env.tmp" "$REPO/.cluster/env"
}
part env write_env
part runner-image bash "$CLUSTER_SRC/runner-image.sh" "$REPO"

log "cluster up in $((SECONDS - T_ALL)) s; env: $REPO/.cluster/env"
printf '%s\n' "${TIMES[@]}" > "$STATE/up-times.txt"
printf 'TIMES %s\n' "${TIMES[@]}" >&2
echo "$REPO/.cluster/env"
}
main "$@"
