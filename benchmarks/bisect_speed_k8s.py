"""Issue 22 on Kubernetes: `jupyter nbvalidation bisect` against the linear scan a user does by hand, on
the REAL single-node cluster (tools/cluster/up.sh). Prints figures; not a test.

    bash tools/cluster/up.sh && .venv/bin/python benchmarks/bisect_speed_k8s.py [--packages 8] [--culprit-index 5]

The scenario of benchmarks/bisect_speed.py (8 unpinned packages from a --find-links folder of local
wheels, the notebook asserting nbvbench<k>.VALUE == 1), against a Jupyter server whose backend is
Kubernetes on a fresh namespace: every validation is a kaniko image build of its requirements (the
wheels travel with the job) and a validation Pod. `run` with the 1.0 wheels is green; with the 2.0
wheels added, red (both checked, not counted).

(ours)   `jupyter nbvalidation bisect --server URL proj/nb.ipynb -o json`: the search through the
         server's API, its probe jobs built and run on the cluster; wall seconds, its validations
         (step 1, the old pins, included) and the culprit it names (checked).
(theirs) the linear scan by hand with the same server: for each changed package in turn (nbvbench0
         first), `jupyter nbvalidation run --server URL --requirements-file scan-i.txt proj/nb.ipynb`
         with the old pins and that one package at 2.0 (each an image build and a Pod), stopping at
         the first red: k + 1 validations (all its configurations are checked green but the k-th).

Wall seconds of whole CLI processes, timed from outside; the cluster does the work (the CPU of this
process tree is the CLI's alone, so it is not compared). One round: a cold round costs ~15 validations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bisect_speed import JUPYTER, must, names, wheel  # noqa: E402
from helpers import write_notebook  # noqa: E402
from real_cluster import ENV_FILE, RUNNER_IMAGE_SH, Cluster, read_env  # noqa: E402

REPO = HERE.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=8)
    ap.add_argument("--culprit-index", type=int, default=5)
    args = ap.parse_args()
    n, culprit = args.packages, args.culprit_index
    if not 0 <= culprit < n:
        raise SystemExit(f"--culprit-index must be within 0..{n - 1}")
    if not ENV_FILE.is_file():
        raise SystemExit(f"the real cluster is not up ({ENV_FILE} is missing): bash tools/cluster/up.sh")
    must(["bash", str(RUNNER_IMAGE_SH), str(REPO)], 0, cwd=REPO, env={})  # this checkout's runner image
    load = os.getloadavg()
    print(f"# machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; Kubernetes "
          f"backend on the real node; {n} changed packages, culprit index {culprit}", flush=True)
    with tempfile.TemporaryDirectory(prefix="nbv-bisect-k8s-") as tmp:
        base = Path(tmp)
        cluster = Cluster(read_env(ENV_FILE), base / "cluster")
        (base / "cluster").mkdir()
        ns = cluster.namespace()
        server = cluster.server(base, ns).start()
        try:
            env = {"JUPYTER_RUNTIME_DIR": str(base / "no-servers"), "JUPYTER_TOKEN": server.token}
            reach = ["--server", server.url]
            proj = server.root / "proj"
            (proj / "wheels").mkdir(parents=True)
            for name in names(n):
                wheel(proj / "wheels", name, 1)
            (proj / "requirements.txt").write_text("--find-links ./wheels\n" + "".join(f"{x}\n" for x in names(n)))
            target = f"nbvbench{culprit}"
            write_notebook(proj / "nb.ipynb", ["import " + ", ".join(names(n)),
                                               f"assert {target}.VALUE == 1, {target}.VALUE"])
            cwd = server.root
            green, _, _ = must([JUPYTER, "nbvalidation", "run", *reach, "proj/nb.ipynb"], 0, cwd=cwd, env=env)
            for name in names(n):
                wheel(proj / "wheels", name, 2)
            red, _, _ = must([JUPYTER, "nbvalidation", "run", *reach, "proj/nb.ipynb"], 1, cwd=cwd, env=env)
            print(f"  untimed: green run {green:.1f} s, red run {red:.1f} s", flush=True)

            t0 = time.perf_counter()
            _, _, proc = must([JUPYTER, "nbvalidation", "bisect", *reach, "proj/nb.ipynb", "-o", "json"], 0,
                              cwd=cwd, env=env)
            ours = time.perf_counter() - t0
            result = json.loads(proc.stdout)
            want = [{"name": target, "from": "1.0", "to": "2.0"}]
            if result["result"] != "found" or result["culprits"] != want:
                raise SystemExit(f"bisect found {result['result']} {result['culprits']}, not {want}")
            print(f"  bisect: {ours:.1f} s wall, {result['validations']} validations, found {target} 1.0 -> 2.0",
                  flush=True)

            scan, steps = 0.0, 0
            for i, moved in enumerate(names(n)):
                pins = [f"{x}==2.0" if x == moved else f"{x}==1.0" for x in names(n)]
                (proj / f"scan-{i}.txt").write_text("--find-links ./wheels\n" + "".join(f"{p}\n" for p in pins))
                wall, _, p = must([JUPYTER, "nbvalidation", "run", *reach, "--requirements-file", f"scan-{i}.txt",
                                   "proj/nb.ipynb"], 1 if i == culprit else 0, cwd=cwd, env=env)
                scan += wall
                steps += 1
                if i == culprit:
                    break
            print(f"  linear scan by hand (run per configuration): {scan:.1f} s wall, {steps} validations",
                  flush=True)
            print(f"(culprit {culprit} of {n}, Kubernetes) bisect {ours:.1f} s wall, {result['validations']} "
                  f"validations; linear scan {scan:.1f} s wall, {steps} validations; ratio bisect / linear "
                  f"{ours / scan:.2f} wall", flush=True)
        finally:
            server.stop()
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    load = os.getloadavg()
    print(f"# load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)


if __name__ == "__main__":
    main()
