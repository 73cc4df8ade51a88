#!/usr/bin/env bash
# Build the etcd, kube-apiserver and kubectl binaries that the Kubernetes test
# harness (tests/k8s_harness.py) runs, from the pinned wrapper modules next to this
# script. Binaries are never committed; they are cached outside the repo in
#
#   ${NBV_TESTBIN:-$HOME/.cache/nbv-testbin}/<k8s-version>/{etcd,kube-apiserver,kubectl}
#
# Idempotent: a binary is rebuilt only when it is missing or when the stamp
# written next to it no longer matches the hash of its wrapper sources
# (main.go, go.mod, go.sum), this script, and the Go version.
#
# Needs Go >= the highest `go` line of the wrappers' go.mod files (1.26 now). Works from an empty
# Go module/build cache: modules come from GOPROXY, go.sum is committed.
#
# Usage: tools/testbin/build.sh [--force]
#   NBV_TESTBIN   root of the binary cache (default ~/.cache/nbv-testbin)
#   GO            go binary to use (default: `go` on PATH, else /usr/local/go/bin/go)
#   NBV_BUILD_P   value for `go build -p` (default: Go's default, = number of CPUs)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
force=0
case "${1:-}" in
  --force) force=1 ;;
  "") ;;
  -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
esac

# --- find Go -----------------------------------------------------------------
go_bin="${GO:-}"
if [[ -z "$go_bin" ]]; then
  if command -v go >/dev/null 2>&1; then
    go_bin="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
  fi
fi
if [[ -z "$go_bin" || ! -x "$go_bin" ]]; then
  cat >&2 <<'EOF'
build.sh: ERROR: Go toolchain not found.
  The Kubernetes test binaries (etcd, kube-apiserver) are built from Go modules
  and need Go >= 1.26. Put `go` on PATH, install it at /usr/local/go, or set GO=/path/to/go.
EOF
  exit 127
fi
go_version="$("$go_bin" env GOVERSION)"          # e.g. go1.26.8
go_minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$go_version")"
# The highest `go 1.N` line of the wrapper modules.
need_minor="$(sed -nE 's/^go 1\.([0-9]+).*/\1/p' "$here/etcd/go.mod" "$here/kube-apiserver/go.mod" "$here/kubectl/go.mod" | sort -n | tail -1)"
if ! [[ "$go_minor" =~ ^[0-9]+$ ]]; then
  echo "build.sh: ERROR: cannot parse the Go version of $go_bin ('$go_version')." >&2
  exit 1
fi
if (( go_minor < need_minor )); then
  if [[ "$("$go_bin" env GOTOOLCHAIN)" == local* ]]; then
    echo "build.sh: ERROR: $go_bin is $go_version but the wrapper modules need Go >= 1.$need_minor (and GOTOOLCHAIN=local)." >&2
    exit 1
  fi
  echo "build.sh: note: $go_bin is $go_version, the wrappers need Go >= 1.$need_minor; go will fetch that toolchain through GOPROXY." >&2
fi

# --- versions come from the wrapper go.mod files (single source of truth) ------
k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit} $1=="require" && $2=="k8s.io/kubernetes" {print $3; exit}' \
  "$here/kube-apiserver/go.mod")"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit} $1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3; exit}' \
  "$here/etcd/go.mod")"
if [[ ! "$k8s_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "build.sh: ERROR: cannot read the k8s.io/kubernetes version from kube-apiserver/go.mod (got '$k8s_version')" >&2
  exit 1
fi
k8s_minor="${BASH_REMATCH[1]}"
[[ -n "$etcd_version" ]] || { echo "build.sh: ERROR: cannot read the etcd version from etcd/go.mod" >&2; exit 1; }
kubectl_version="$(awk '$1=="k8s.io/kubectl" && $2 ~ /^v/ {print $2; exit}' "$here/kubectl/go.mod")"
if [[ "$kubectl_version" != "v0.${k8s_version#v1.}" ]]; then
  echo "build.sh: ERROR: kubectl/go.mod pins k8s.io/kubectl $kubectl_version, which is not the staging version of $k8s_version (v0.${k8s_version#v1.})" >&2
  exit 1
fi

root="${NBV_TESTBIN:-$HOME/.cache/nbv-testbin}"
out="$root/${k8s_version#v}"
mkdir -p "$out"

# Serialise concurrent runs (two pytest sessions, CI + a developer shell...).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.build.lock"
  flock 9
fi

export CGO_ENABLED=0
# -mod=readonly: go.sum is committed and complete; never rewrite the sources.
# -buildvcs=false: the wrappers live inside the project's git repo.
# -gcflags=all=-dwarf=false: the compiler writes no DWARF that -ldflags -w would drop at link anyway
# (about 10 % less compile CPU, measured on the etcd build from an empty build cache: 62 s user against 68 s)
common_flags=(-trimpath -mod=readonly -buildvcs=false -gcflags=all=-dwarf=false)
if [[ -n "${NBV_BUILD_P:-}" ]]; then common_flags+=(-p "$NBV_BUILD_P"); fi

hash_inputs() { # dir extra-string...
  local dir="$1"; shift
  {
    cat "$dir/main.go" "$dir/go.mod" "$dir/go.sum" "$here/build.sh"
    printf '%s\n' "$go_version" "$@"
  } | sha256sum | cut -d' ' -f1
}

# build NAME DIR LDFLAGS STAMP-EXTRA
build() {
  local name="$1" dir="$2" ldflags="$3" extra="$4"
  local bin="$out/$name" stamp="$out/.$name.stamp" want have=""
  want="$(hash_inputs "$dir" "$extra")"
  [[ -f "$stamp" ]] && have="$(cat "$stamp")"
  if (( ! force )) && [[ -x "$bin" && "$have" == "$want" ]]; then
    echo "build.sh: $name is up to date ($bin)" >&2
    return 0
  fi
  echo "build.sh: building $name ($extra) with $go_version -> $bin" >&2
  local t0=$SECONDS tmp="$bin.tmp.$$"
  rm -f "$stamp"
  ( cd "$dir" && "$go_bin" build "${common_flags[@]}" -ldflags "$ldflags" -o "$tmp" . ) || {
    rm -f "$tmp"
    echo "build.sh: ERROR: building $name failed (see the go output above)." >&2
    exit 1
  }
  mv -f "$tmp" "$bin"
  echo "$want" > "$stamp"
  echo "build.sh: built $name in $((SECONDS - t0)) s, $(du -h "$bin" | cut -f1)" >&2
}

# etcd: its version string is a constant in go.etcd.io/etcd/api/v3/version.
build etcd "$here/etcd" "-s -w" "etcd $etcd_version"

# kube-apiserver: without these ldflags /version reports v0.0.0-master.
# buildDate is not part of the stamp, so it does not force rebuilds.
cv=k8s.io/component-base/version
build kube-apiserver "$here/kube-apiserver" \
  "-s -w -X $cv.gitVersion=$k8s_version -X $cv.gitMajor=1 -X $cv.gitMinor=$k8s_minor -X $cv.gitTreeState=clean -X $cv.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "kubernetes $k8s_version"

# kubectl, for the `kubectl get` / `kubectl describe` assertions; the same ldflags.
build kubectl "$here/kubectl" \
  "-s -w -X $cv.gitVersion=$k8s_version -X $cv.gitMajor=1 -X $cv.gitMinor=$k8s_minor -X $cv.gitTreeState=clean" \
  "kubectl $k8s_version"

# the first line only; sed reads to the end, so etcd never gets SIGPIPE (with pipefail, `| head -1` failed CI with 141)
"$out/etcd" --version | sed -n 1p >&2
"$out/kube-apiserver" --version >&2
"$out/kubectl" version --client >&2

# stdout: the paths, one per line (for scripts); the harness finds them itself.
echo "$out/etcd"
echo "$out/kube-apiserver"
echo "$out/kubectl"
