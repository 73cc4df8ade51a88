#!/usr/bin/env bash
# Build the node-side Kubernetes binaries that the real single-node cluster of
# tools/cluster runs, beside the etcd / kube-apiserver / kubectl of build.sh:
#
#   kubelet, kube-controller-manager, kube-scheduler   (k8s.io/kubernetes, the kube-apiserver
#       wrapper's go.mod and staging replace set, so they reuse its module and build cache)
#   kaniko-executor                                     (github.com/GoogleContainerTools/kaniko,
#       pinned by the kaniko/ wrapper module's tools.go)
#
# into ${NBV_TESTBIN:-$HOME/.cache/nbv-testbin}/<k8s-version>/. Idempotent like build.sh: a
# binary is rebuilt only when it is missing or its stamp (hash of the wrapper's sources, this
# script and the Go version) changed. Build kube-apiserver (build.sh) first: then kubelet and the
# controller manager mostly link packages already in the Go build cache.
#
# Usage: tools/testbin/build-node.sh [--force] [NAME...]   (default: all four)
#   prints the built paths, one per line, on stdout
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
force=0
names=()
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    kubelet|kube-controller-manager|kube-scheduler|kaniko-executor) names+=("$a") ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-node.sh: unknown argument: $a" >&2; exit 2 ;;
  esac
done
(( ${#names[@]} )) || names=(kubelet kube-controller-manager kube-scheduler kaniko-executor)

go_bin="${GO:-}"
if [[ -z "$go_bin" ]]; then
  if command -v go >/dev/null 2>&1; then go_bin="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then go_bin=/usr/local/go/bin/go; fi
fi
if [[ -z "$go_bin" || ! -x "$go_bin" ]]; then
  echo "build-node.sh: ERROR: Go toolchain not found (need Go >= 1.25; put go on PATH or set GO=)." >&2
  exit 127
fi
go_version="$("$go_bin" env GOVERSION)"

k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/kubelet/go.mod")"
kaniko_version="$(awk '$1=="require" && $2=="github.com/GoogleContainerTools/kaniko" {print $3; exit} $1=="github.com/GoogleContainerTools/kaniko" && $2 ~ /^v/ {print $2; exit}' "$here/kaniko/go.mod")"
if [[ ! "$k8s_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "build-node.sh: ERROR: cannot read the k8s.io/kubernetes version from kubelet/go.mod (got '$k8s_version')" >&2
  exit 1
fi
k8s_minor="${BASH_REMATCH[1]}"
[[ -n "$kaniko_version" ]] || { echo "build-node.sh: ERROR: cannot read the kaniko version from kaniko/go.mod" >&2; exit 1; }
# The node binaries must be the apiserver's version (one module graph, no version skew).
api_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/kube-apiserver/go.mod")"
if [[ "$api_version" != "$k8s_version" ]]; then
  echo "build-node.sh: ERROR: kubelet/go.mod pins $k8s_version but kube-apiserver/go.mod pins $api_version" >&2
  exit 1
fi

root="${NBV_TESTBIN:-$HOME/.cache/nbv-testbin}"
out="$root/${k8s_version#v}"
mkdir -p "$out"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.build-node.lock"
  flock 9
fi

export CGO_ENABLED=0
# -gcflags=all=-dwarf=false: the compiler writes no DWARF that -ldflags -w would drop at link anyway
# (about 10 % less compile CPU, measured on the etcd build from an empty build cache: 62 s user against 68 s)
common_flags=(-trimpath -mod=readonly -buildvcs=false -gcflags=all=-dwarf=false)
if [[ -n "${NBV_BUILD_P:-}" ]]; then common_flags+=(-p "$NBV_BUILD_P"); fi

hash_inputs() { # dir extra...
  local dir="$1"; shift
  { cat "$dir"/*.go "$dir/go.mod" "$dir/go.sum" "$here/build-node.sh"; printf '%s\n' "$go_version" "$@"; } \
    | sha256sum | cut -d' ' -f1
}

# build NAME DIR PACKAGE LDFLAGS STAMP-EXTRA
build() {
  local name="$1" dir="$2" pkg="$3" ldflags="$4" extra="$5"
  local bin="$out/$name" stamp="$out/.$name.stamp" want have=""
  want="$(hash_inputs "$dir" "$extra")"
  [[ -f "$stamp" ]] && have="$(cat "$stamp")"
  if (( ! force )) && [[ -x "$bin" && "$have" == "$want" ]]; then
    echo "build-node.sh: $name is up to date ($bin)" >&2
    echo "$bin"
    return 0
  fi
  echo "build-node.sh: building $name ($extra) with $go_version -> $bin" >&2
  local t0=$SECONDS tmp="$bin.tmp.$$"
  rm -f "$stamp"
  ( cd "$dir" && "$go_bin" build "${common_flags[@]}" -ldflags "$ldflags" -o "$tmp" "$pkg" ) || {
    rm -f "$tmp"
    echo "build-node.sh: ERROR: building $name failed (see the go output above)." >&2
    exit 1
  }
  mv -f "$tmp" "$bin"
  echo "$want" > "$stamp"
  echo "build-node.sh: built $name in $((SECONDS - t0)) s, $(du -h "$bin" | cut -f1)" >&2
  echo "$bin"
}

cv=k8s.io/component-base/version
kver="-X $cv.gitVersion=$k8s_version -X $cv.gitMajor=1 -X $cv.gitMinor=$k8s_minor -X $cv.gitTreeState=clean"
for name in "${names[@]}"; do
  case "$name" in
    kubelet|kube-controller-manager|kube-scheduler)
      build "$name" "$here/$name" . "-s -w $kver" "$name $k8s_version" ;;
    kaniko-executor)
      build kaniko-executor "$here/kaniko" github.com/GoogleContainerTools/kaniko/cmd/executor \
        "-s -w -X github.com/GoogleContainerTools/kaniko/pkg/version.version=$kaniko_version" \
        "kaniko $kaniko_version" ;;
  esac
done
