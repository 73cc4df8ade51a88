#!/usr/bin/env bash
# Install everything the tests need, from nothing, then run the whole suite.
#   bash tools/setup-and-test.sh            (what .ci/run runs)
#   bash tools/setup-and-test.sh ARGS...    set up as below, then one `pytest ARGS...` (cluster up)
# Needs: python3 (>= 3.11), node 20 + npm, go (>= 1.26) for the Kubernetes
# test binaries, root, and apt-get for Chromium and the real cluster's Debian parts.
#
# Two lanes, so that the cold Go builds (most of a cold run's fixed cost) overlap the tests that
# do not need them:
#   lane K (background): the Go builds of the Kubernetes binaries -> the fresh-host test of the
#           cluster harness -> tools/cluster/up.sh -> pytest -m "(k8s or cluster) and not alone" -n 2
#           (the real node's tests and the kube-apiserver + etcd harness's) -> pytest -m alone (the
#           registry faults, which block the registry every real-node test uses: nothing beside them)
#   lane L (foreground): Chromium, the venv -> pytest -m "not k8s and not cluster" (-n 3; with
#           NBV_TESTBIN on an empty folder, so a test that needs the binaries and is not marked
#           fails), and beside it lint (ruff, mypy, eslint, prettier) and jest
# The markers come from what a test uses (tests/conftest.py kubernetes_marker_of). Every part runs;
# the run fails when any part fails. The cluster is torn down (tools/cluster/down.sh, which fails
# when anything is left on the host) when this script exits. The 30 slowest tests of each pytest
# run are printed at its end, and each lane's log in full at the end of the run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
step() { printf '\n=== %s (%s, +%ds)\n' "$1" "$(date +%H:%M:%S)" "$SECONDS"; }
T="$(mktemp -d)"
K_PID=""
LINT_PID=""
cluster_is_up() { ip link show nbv0 >/dev/null 2>&1 || [ -e "${NBV_CLUSTER_STATE:-/var/tmp/nbv-node}" ]; }  # its bridge, or its state dir
kill_tree() { # pid: it and everything below it
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  if [ -n "$K_PID" ]; then kill_tree "$K_PID"; wait "$K_PID" 2>/dev/null || true; fi
  if [ -n "$LINT_PID" ]; then kill_tree "$LINT_PID"; wait "$LINT_PID" 2>/dev/null || true; fi
  if cluster_is_up; then
    step "tear the real cluster down (tools/cluster/down.sh)"
    bash tools/cluster/down.sh || { echo "setup-and-test: tools/cluster/down.sh left something behind" >&2; rc=1; }
  fi
  rm -rf "$T"
  exit "$rc"
}
trap cleanup EXIT

# a cluster left up on this host (a developer's tools/cluster/up.sh, or a run that was killed)
# is torn down first: the harness test below needs a host without it, and up.sh a clean start
if cluster_is_up; then
  step "a real cluster is already up on this host: tear it down first (tools/cluster/down.sh)"
  bash tools/cluster/down.sh
fi

PYTEST=(python -m pytest -ra -p no:cacheprovider --durations=30)
# every pytest run below fails when a test skipped that tests/conftest.py ALLOWED_SKIPS does not name
export NBV_FAIL_ON_SKIP=1
# Python writes its bytecode, as on a developer's machine: this machine kind sets
# PYTHONDONTWRITEBYTECODE, so every kernel of an environment the tests build, and every process
# started from a copy of the package, compiled what it imported each time it started (the product
# leaves __pycache__ out of every key and fingerprint). Measured: docs/benchmarks.md, stop 37.
unset PYTHONDONTWRITEBYTECODE

# ---- lane K: Go builds -> the cluster -> the real-node tests (background, its own log) ----------
lane_k() {
  set -euo pipefail
  step "lane K: Go builds of the Kubernetes test binaries started (cached in ~/.cache/nbv-testbin)"
  ( bash tools/testbin/build.sh && bash tools/testbin/build-node.sh ) >"$T/go.log" 2>&1 &
  local go_pid=$! go_rc=0 prep_rc=0
  # one dpkg at a time: lane L installs Chromium first
  until [ -f "$T/apt.done" ]; do sleep 1; done
  step "lane K: the cluster's Debian packages and its Go-free images (tools/cluster/up.sh --prepare)"
  bash tools/cluster/up.sh --prepare || prep_rc=$?
  step "lane K: wait for the Go builds (kube-apiserver, etcd, kubectl, kubelet, controller manager, scheduler, kaniko)"
  wait "$go_pid" || go_rc=$?
  cat "$T/go.log"
  if [ "$go_rc" -ne 0 ]; then echo "setup-and-test: the Go builds failed (exit $go_rc), see above" >&2; return "$go_rc"; fi
  [ "$prep_rc" -eq 0 ] || { echo "setup-and-test: up.sh --prepare failed (exit $prep_rc)" >&2; return "$prep_rc"; }
  step "lane K: the cluster harness on a host without its parts (tools/cluster/test-fresh-host.sh)"
  bash tools/cluster/test-fresh-host.sh
  step "lane K: the real single-node cluster (tools/cluster/up.sh)"
  bash tools/cluster/up.sh
  [ "$#" -eq 0 ] || return 0   # a developer's selection: lane L runs it
  until [ -f "$T/venv.done" ]; do sleep 2; done   # lane L makes the venv
  export PATH="$ROOT/.venv/bin:$PATH"
  local rc=0
  step "lane K: pytest -m \"(k8s or cluster) and not alone\" (the real node's tests and the harness's, two workers)"
  "${PYTEST[@]}" -n 2 --dist loadgroup -m "(k8s or cluster) and not alone" || rc=1
  step "lane K: pytest -m alone (the registry faults and the API server outage: they block a part every other real-node test uses)"
  "${PYTEST[@]}" -m alone || rc=1
  step "lane K: done"
  return "$rc"
}
lane_k "$@" >"$T/lane-k.log" 2>&1 &
K_PID=$!

step "system packages: Chromium for the browser tests"
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
/usr/bin/chromium --version 2>/dev/null | sed -n 1p || true
step "system packages: slirp4netns, each run's outbound network (LocalBackend.network auto)"
if [ ! -x /usr/bin/slirp4netns ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slirp4netns
fi
/usr/bin/slirp4netns --version 2>/dev/null | sed -n 1p || true
step "system packages: openssh-server, the real sshd on loopback of the notebooks-from-git-over-ssh tests"
if [ ! -x /usr/sbin/sshd ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server
fi
/usr/sbin/sshd -V 2>&1 | sed -n 1p || true
touch "$T/apt.done"

step "Python environment (.venv) with the project and its test extras"
[ -x .venv/bin/python ] || python3 -m venv .venv
# no filter pipe here: a failing pip install must fail the run
.venv/bin/python -m pip install -q --disable-pip-version-check uv
# The install builds the JupyterLab extension (jlpm install + jlpm build:prod in labextension/:
# 13 s and 18 s of CPU before the first test) unless its output is there. A clean checkout takes
# it from ~/.cache when it was built before from the same files: the key hashes every file of
# labextension/ but node_modules and the build's own output (sources, styles, schema,
# package.json, yarn.lock, the configs), pyproject.toml (the build hook) and node's version.
LABEXT_OUT=jupyter_nbvalidation/labextension
labext_key() {
  { find labextension \( -path labextension/node_modules -o -path labextension/lib -o -path labextension/.yarn \
      -o -name '*.tsbuildinfo' \) -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum pyproject.toml; node --version; } | sha256sum | cut -c1-32
}
LABEXT_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/nbv-labextension/$(labext_key)"
LABEXT_BUILT=0
if [ ! -e "$LABEXT_OUT" ]; then
  if [ -f "$LABEXT_CACHE/package.json" ]; then
    cp -r "$LABEXT_CACHE" "$LABEXT_OUT"   # new mtimes: the editable build rebuilds when src/ is newer
    echo "the JupyterLab extension as built before from these files: $LABEXT_CACHE"
  else
    LABEXT_BUILT=1
  fi
fi
# bytecode compiled once here (~10 s): every server, kernel, CLI and worker the tests start would
# otherwise compile what it imports again, where PYTHONDONTWRITEBYTECODE is set (this machine kind)
.venv/bin/uv pip install --compile-bytecode --python .venv/bin/python -e ".[test,docs,hub]"
if [ "$LABEXT_BUILT" = 1 ]; then  # this build, the only one kept
  rm -rf "${LABEXT_CACHE%/*}" && mkdir -p "${LABEXT_CACHE%/*}" && cp -a "$LABEXT_OUT" "$LABEXT_CACHE.tmp" \
    && mv "$LABEXT_CACHE.tmp" "$LABEXT_CACHE"
fi
.venv/bin/python -m compileall -q jupyter_nbvalidation tests >/dev/null
# configurable-http-proxy (npm) for the real JupyterHub of tests/hub, in the venv's own node prefix
# (tests/hub/harness.py finds it there): the Hub's proxy, as zero-to-jupyterhub runs it
if [ ! -x .venv/node/node_modules/.bin/configurable-http-proxy ]; then
  npm install --prefix .venv/node --no-audit --no-fund --loglevel=error configurable-http-proxy@5
fi
export PATH="$ROOT/.venv/bin:$PATH"
# node_modules for lint, jest and the browser tests (the build above made it unless it was reused)
(cd labextension && jlpm install)
touch "$T/venv.done"

if [ "$#" -gt 0 ]; then  # a developer's selection: everything set up, the cluster up, one pytest run
  step "wait for lane K (Go builds, the cluster)"
  K_RC=0; wait "$K_PID" || K_RC=$?; K_PID=""
  cat "$T/lane-k.log"
  [ "$K_RC" -eq 0 ] || exit "$K_RC"
  step "pytest $*"
  "${PYTEST[@]}" -n "${NBV_PYTEST_WORKERS:-2}" --dist loadgroup "$@"
  exit 0
fi

# ---- lane L (foreground) -----------------------------------------------------------------------
L_RC=0
# lint and jest beside lane L's tests, not after them: single-threaded, they would hold one core
# while the other idles once lane K is done (about 30 s at the end of the run). The install's
# checks too (5 s, no test waits for them).
step "lane L: the install's checks, lint (ruff, mypy, eslint, prettier) and jest, in the background (their own log)"
lint_and_jest() {
  local rc=0
  jupyter labextension list 2>&1 | grep -i nbvalidation || { echo "the JupyterLab extension is not installed" >&2; rc=1; }
  jupyter server extension list 2>&1 | grep -i -A2 "jupyter_nbvalidation" \
    || { echo "the server extension is not enabled" >&2; rc=1; }
  ruff check . || rc=1
  # mypy's cache in ~/.cache, not in the clean checkout: with a warm HOME it checks only what
  # changed (a module's cache entry is re-used only while its source's hash matches), 19 s -> 3 s CPU
  MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/nbv-mypy" mypy || rc=1
  (cd labextension && jlpm lint && jlpm prettier:check) || rc=1
  (cd labextension && jlpm test) || rc=1
  # the docs site, with its three generated references: a warning (a broken link, a page left out
  # of the toctree, a trait or route the generators cannot render) fails the run
  sphinx-build -W -q -b html docs docs/_build/html || rc=1
  return "$rc"
}
lint_and_jest >"$T/lint.log" 2>&1 &
LINT_PID=$!
step "lane L: pytest -m \"not k8s and not cluster\" (no Kubernetes binary needed; the Go builds go on)"
mkdir -p "$T/no-testbin"
# three workers on two cores: its tests wait on kernels, servers and builds a third of the time
# (a -n 2 run of the inner tier left 34 % of the CPU idle; docs/benchmarks.md, stop 34)
NBV_TESTBIN="$T/no-testbin" "${PYTEST[@]}" -n "${NBV_LANE_L_WORKERS:-3}" --dist loadgroup \
  -m "not k8s and not cluster" || L_RC=1

step "lane L: lint and jest (configured in pyproject.toml and labextension/)"
wait "$LINT_PID" || L_RC=1
LINT_PID=""
cat "$T/lint.log"

step "lane L: done; wait for lane K (the real node)"
K_RC=0; wait "$K_PID" || K_RC=$?
K_PID=""
step "lane K's log (Go builds, cluster, the Kubernetes tests), exit $K_RC"
cat "$T/lane-k.log"
step "result: lane L exit $L_RC, lane K exit $K_RC"
[ "$L_RC" -eq 0 ] && [ "$K_RC" -eq 0 ]
