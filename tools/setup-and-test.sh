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

step "kube-apiserver, etcd and kubectl for the Kubernetes tests (cached in ~/.cache/nbv-testbin)"
bash tools/testbin/build.sh

step "kubelet, kube-controller-manager, kube-scheduler and kaniko (cached in ~/.cache/nbv-testbin)"
bash tools/testbin/build-node.sh

cluster_down() {
  local rc=$?
  step "tear the real cluster down (tools/cluster/down.sh)"
  bash tools/cluster/down.sh || { echo "setup-and-test: tools/cluster/down.sh left something behind" >&2; rc=1; }
  exit "$rc"
}
trap cluster_down EXIT
step "the cluster harness on a host without its parts (tools/cluster/test-fresh-host.sh)"
bash tools/cluster/test-fresh-host.sh
step "the real single-node cluster (tools/cluster/up.sh)"
bash tools/cluster/up.sh

step "pytest: the whole suite (with the real-node tests, tests/test_k8s_real_node.py)"
# two workers (the machine's cores); the tests that share the real node, the browser or the
# corpus run in one group each (tests/conftest.py XDIST_GROUPS), one after another on one worker.
# NBV_PYTEST_WORKERS=0 runs serially; the 30 slowest tests are printed at the end.
python -m pytest -ra -p no:cacheprovider --durations=30 -n "${NBV_PYTEST_WORKERS:-2}" --dist loadgroup "$@"
