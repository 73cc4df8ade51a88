#!/usr/bin/env bash
# Install everything the tests need, from nothing, then run the whole suite.
#   bash tools/setup-and-test.sh            (what .ci/run runs)
# Needs: python3 (>= 3.10), node 20 + npm, go (>= 1.26) for the Kubernetes
# test binaries, root, and apt-get for Chromium and the real cluster's Debian parts.
# The real single-node cluster (tools/cluster/up.sh) comes up before pytest and is torn down
# (tools/cluster/down.sh, which fails when anything is left on the host) when this script exits.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

# The Go builds of the Kubernetes test binaries (cold: most of 9 min, compiling) run in the
# background from the start, beside the downloads, the venv and the lint below; their output is
# printed when they are waited for, and a failed build fails the run there.
step "Kubernetes test binaries: Go builds started in the background (cached in ~/.cache/nbv-testbin)"
GO_LOG="$(mktemp)"
( bash tools/testbin/build.sh && bash tools/testbin/build-node.sh ) >"$GO_LOG" 2>&1 &
GO_PID=$!
stop_go() { kill "$GO_PID" 2>/dev/null || true; }
trap stop_go EXIT

step "system packages: Chromium for the browser tests"
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
/usr/bin/chromium --version 2>/dev/null | sed -n 1p || true

step "Python environment (.venv) with the project and its test extras"
[ -x .venv/bin/python ] || python3 -m venv .venv
# no filter pipe here: a failing pip install must fail the run
.venv/bin/python -m pip install -q --disable-pip-version-check uv
# builds the JupyterLab extension (jlpm install + jlpm build:prod in labextension/)
.venv/bin/uv pip install --python .venv/bin/python -e ".[test]"
export PATH="$ROOT/.venv/bin:$PATH"
jupyter labextension list 2>&1 | grep -i nbvalidation
jupyter server extension list 2>&1 | grep -i -A2 "jupyter_nbvalidation"

step "lint: ruff, mypy, eslint, prettier (configured in pyproject.toml and labextension/)"
ruff check .
mypy
(cd labextension && jlpm install && jlpm lint && jlpm prettier:check)

step "frontend unit tests (jest)"
(cd labextension && jlpm install && jlpm test)

step "Kubernetes test binaries: wait for the Go builds (kube-apiserver, etcd, kubectl, kubelet, controller manager, scheduler, kaniko)"
go_rc=0; wait "$GO_PID" || go_rc=$?
trap - EXIT
cat "$GO_LOG"; rm -f "$GO_LOG"
if [ "$go_rc" -ne 0 ]; then echo "setup-and-test: the Go builds failed (exit $go_rc), see above" >&2; exit "$go_rc"; fi

cluster_down() {
  local rc=$?
  step "tear the real cluster down (tools/cluster/down.sh)"
  bash tools/cluster/down.sh || { echo "setup-and-test: tools/cluster/down.sh left something behind" >&2; rc=1; }
  exit "$rc"
}
trap cluster_down EXIT
# a cluster left up on this host (a developer's tools/cluster/up.sh, or a run that was killed)
# is torn down first: the harness test below needs a host without it, and up.sh a clean start
if ip link show nbv0 >/dev/null 2>&1 || [ -e "${NBV_CLUSTER_STATE:-/var/tmp/nbv-node}" ]; then
  step "a real cluster is already up on this host: tear it down first (tools/cluster/down.sh)"
  bash tools/cluster/down.sh
fi
step "the cluster harness on a host without its parts (tools/cluster/test-fresh-host.sh)"
bash tools/cluster/test-fresh-host.sh
step "the real single-node cluster (tools/cluster/up.sh)"
bash tools/cluster/up.sh

step "pytest: the whole suite (with the real-node tests, tests/test_k8s_real_node.py)"
# two workers (the machine's cores); the tests that share the real node, the browser or the
# corpus run in one group each (tests/conftest.py XDIST_GROUPS), one after another on one worker.
# NBV_PYTEST_WORKERS=0 runs serially; the 30 slowest tests are printed at the end.
python -m pytest -ra -p no:cacheprovider --durations=30 -n "${NBV_PYTEST_WORKERS:-2}" --dist loadgroup "$@"
