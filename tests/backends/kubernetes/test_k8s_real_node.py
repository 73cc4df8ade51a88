"""The Kubernetes backend on a REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``): a kubelet on containerd runs the Pods, the real Job
controller completes the kaniko build Jobs, kaniko pushes to the registry Pod,
containerd pulls the validation image by digest. The project's own `jupyter server`
runs with ``backend = "kubernetes"`` and is driven through its REST API. Nothing
writes a status on anyone's behalf.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_node.py``
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
import uuid

import pytest
from helpers import job_of, phases, reasons, wait, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

BUILD_WAIT = 420.0  # a cold kaniko build on a loaded 2-core machine, with pip reaching the index
ALL_OK = [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
          Reason.VALIDATION_SUCCEEDED]
DIGEST_RE = re.compile(r"^(?P<repo>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")
ANSI = "\x1b["


def fresh(requirement: str) -> str:
    """``requirement`` with an always-true marker new to this run: a requirement set that no image
    was built for yet, so the job really builds (the same set again reuses the image)."""
    return f'{requirement}; platform_machine != "nbv-{uuid.uuid4().hex[:12]}"'


def terminal(api, name: str, timeout: float = BUILD_WAIT) -> dict:
    return wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(job_of(api, name)),
                timeout, f"job {name} to end")


def events(api, name: str, at_least: int) -> list[dict]:
    return wait(lambda: (lambda e: e if len(e) >= at_least else None)(api.request("GET", f"jobs/{name}/events")["items"]),
                30, f"{at_least} events of {name}")


def build_pods(cluster, ns: str, name: str) -> list[dict]:
    got = cluster.get(ns, "pods", "-l", f"batch.kubernetes.io/job-name={obj.build_job_name(name)}")
    return got["items"] if got else []


def validation_pods(cluster, ns: str, name: str) -> list[dict]:
    got = cluster.get(ns, "pods", "-l", f"nbvalidation.dev/job={name},nbvalidation.dev/component=validation")
    return got["items"] if got else []


def events_about(cluster, ns: str, involved: str) -> list[dict]:
    got = cluster.get(ns, "events", "--field-selector", f"involvedObject.name={involved}")
    return got["items"] if got else []


def runner_terminated(pod: dict, container: str) -> dict:
    (cs,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == container]
    return cs["state"]["terminated"]


def node_disk_held_by(cluster, pod: dict, container: str) -> int:
    """Bytes the node's disk holds for ``container``'s writable layer (containerd's overlay
    snapshot of it, which stays while the Pod exists), as ``ctr snapshots usage`` measures it."""
    (cs,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == container]
    cid = cs["containerID"].removeprefix("containerd://")
    ctr = shutil.which("ctr")
    assert ctr, "ctr (containerd's client, installed by tools/cluster/up.sh) is not on PATH"
    sock = f"{cluster.env['NBV_CLUSTER_STATE']}/containerd/containerd.sock"
    p = subprocess.run([ctr, "--address", sock, "-n", "k8s.io", "snapshots", "usage", cid],
                       capture_output=True, text=True, timeout=120, check=True)
    key, size, unit, _inodes = p.stdout.splitlines()[-1].split()
    assert key == cid, p.stdout
    return int(float(size) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit])


@pytest.fixture
def ns(real_cluster):
    return real_cluster.namespace()


@pytest.fixture
def server(real_cluster, ns, tmp_path):
    """One started `jupyter server` on the cluster (stopped at the end)."""
    started = []

    def make(name: str = "server", **traits):
        s = real_cluster.server(tmp_path, ns, name, **traits)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def test_real_build_pushes_by_digest_and_the_pod_pulls_exactly_it(real_cluster, ns, server):
    """ADR-037 end to end on a real node: Initializing -> Building (a kaniko Job run by the real
    Job controller, pushed to the registry) -> BuildComplete (the digest recorded) ->
    ValidationRunning (a Pod that containerd pulled by exactly that digest) -> Succeeded; the
    kernel sees its declared requirement and nothing of the server; one Event per transition,
    and `kubectl describe nvj` shows the timeline."""
    s = server().start()
    api = s.client()
    write_notebook(s.root / "proj" / "nb.ipynb", [
        "import six\nprint('six', six.__version__)",
        # the environment is clean: the runner and the server live elsewhere (tornado is ipykernel's own)
        "import importlib.util as u\n"
        "leaked = [m for m in ('yaml', 'nbformat', 'nbclient', 'jupyter_server', 'jupyter_nbvalidation')\n"
        "          if u.find_spec(m) is not None]\nassert leaked == [], leaked",
    ])
    (s.root / "proj" / "requirements.txt").write_text(fresh("six==1.16.0") + "\n")
    job = api.request("POST", "jobs", {"notebook": {"path": "proj/nb.ipynb"}})
    name = job["metadata"]["name"]
    done = terminal(api, name)
    st = done["status"]
    assert st["phase"] == Phase.SUCCEEDED, json.dumps(st, indent=1)
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING,
                            Phase.SUCCEEDED]

    # recorded by digest, and the registry holds exactly that manifest
    reference = st["buildStatus"]["imageReference"]
    m = DIGEST_RE.match(reference)
    assert m and m["repo"].startswith(real_cluster.env["NBV_REGISTRY"] + "/"), reference
    repo_path = m["repo"].split("/", 1)[1]
    req = urllib.request.Request(f"http://{real_cluster.env['NBV_REGISTRY_HOST']}/v2/{repo_path}/manifests/{m['digest']}",
                                 method="HEAD", headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                                                                   "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - the harness's registry Pod
        assert r.status == 200 and r.headers["Docker-Content-Digest"] == m["digest"]

    # the build ran as a real Job whose Pod the kubelet ran to completion; kaniko wrote the digest
    bj = real_cluster.get(ns, "job", obj.build_job_name(name))
    assert {c["type"]: c["status"] for c in bj["status"]["conditions"]}.get("Complete") == "True", bj["status"]
    (bp,) = build_pods(real_cluster, ns, name)
    term = runner_terminated(bp, obj.BUILD_CONTAINER)
    assert term["exitCode"] == 0 and term["message"].strip() == m["digest"], term
    # the finished build Pod stays (its log is the build's evidence), but not the base image
    # kaniko unpacked into its container (--cleanup): that was ~350 MiB and 25k files on the node
    held = node_disk_held_by(real_cluster, bp, obj.BUILD_CONTAINER)
    assert held < 16 * 2**20, f"the finished build's container holds {held / 2**20:.1f} MiB on the node"

    # the validation Pod: spec and the image containerd actually ran are that digest
    (pod,) = validation_pods(real_cluster, ns, name)
    (ctr,) = [c for c in pod["spec"]["containers"] if c["name"] == obj.RUNNER_CONTAINER]
    assert ctr["image"] == reference
    (cs,) = pod["status"]["containerStatuses"]
    assert cs["imageID"].endswith("@" + m["digest"]), cs
    assert cs["state"]["terminated"]["exitCode"] == 0
    assert pod["status"]["phase"] == "Succeeded"

    evs = events(api, name, 5)
    assert reasons(evs) == ALL_OK

    p = real_cluster.kubectl("describe", "nvj", name, namespace=ns)
    listed = [line.split()[1] for line in p.stdout.split("Events:", 1)[1].splitlines()
              if line.strip().startswith(("Normal", "Warning"))]
    assert listed == ALL_OK, p.stdout
    assert reference in p.stdout


def test_failing_notebook_reports_its_cell_error_and_traceback(real_cluster, ns, server):
    s = server().start()
    api = s.client()
    write_notebook(s.root / "bad.ipynb", ["x = 1", "def f():\n    return 1 / 0\n\nf()", "print('never')"])
    job = api.request("POST", "jobs", {"notebook": {"path": "bad.ipynb"}})
    name = job["metadata"]["name"]
    done = terminal(api, name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING,
                            Phase.FAILED]
    assert st["failedCellIndex"] == 1
    assert st["message"] == "Cell 2 raised ZeroDivisionError: division by zero"
    (failed,) = [r for r in st["results"] if r.get("status") == "Failure"]
    assert failed["cellIndex"] == 1 and failed["errorName"] == "ZeroDivisionError"
    assert failed["errorMessage"] == "division by zero"
    # the traceback came from the real kernel in the Pod (through the runner's result in the log)
    tb = failed["output"]  # the kernel's traceback, without its ANSI colours
    assert "ZeroDivisionError" in tb and "return 1 / 0" in tb and ANSI not in tb, failed
    # the runner wrote its summary to /dev/termination-log in the real Pod (the kubelet's file, in place)
    (pod,) = validation_pods(real_cluster, ns, name)
    term = runner_terminated(pod, obj.RUNNER_CONTAINER)
    assert term["exitCode"] == 1 and json.loads(term["message"])["verdict"] == "Failed", term
    assert reasons(events(api, name, 5))[-1] == Reason.VALIDATION_FAILED


def test_unresolvable_requirement_fails_in_building_and_no_validation_pod_exists(real_cluster, ns, server):
    s = server().start()
    api = s.client()
    write_notebook(s.root / "nb.ipynb", ["print(1)"])
    job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {
        "requirements": ["nbv-there-is-no-such-distribution==0.0.1"]}}})
    name = job["metadata"]["name"]
    done = terminal(api, name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED), json.dumps(st, indent=1)
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert "nbv-there-is-no-such-distribution" in st["message"] and ANSI not in st["message"], st["message"]
    assert "BackoffLimitExceeded" in st["message"]
    assert "imageReference" not in st["buildStatus"]
    # the real Job controller failed the Job; its one Pod ran kaniko, which failed in pip
    bj = real_cluster.get(ns, "job", obj.build_job_name(name))
    assert {c["type"]: c["reason"] for c in bj["status"]["conditions"] if c["status"] == "True"}.get(
        "Failed") == "BackoffLimitExceeded", bj["status"]
    (bp,) = build_pods(real_cluster, ns, name)
    assert runner_terminated(bp, obj.BUILD_CONTAINER)["exitCode"] != 0
    # no validation Pod, ever: none now, and the scheduler never saw one
    assert validation_pods(real_cluster, ns, name) == []
    assert events_about(real_cluster, ns, obj.validation_pod_name(name)) == []
    assert reasons(events(api, name, 3)) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_FAILED]


def test_cancel_during_build_removes_the_build_job_and_its_pod(real_cluster, ns, server):
    s = server().start()
    api = s.client()
    write_notebook(s.root / "nb.ipynb", ["print(1)"])
    # a build that takes a while (a large wheel), so the cancel lands while kaniko runs
    job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"},
                                       "podConfig": {"buildConfig": {"requirements": [fresh("numpy==2.2.6")]}}})
    name = job["metadata"]["name"]
    wait(lambda: any(p["status"].get("phase") == "Running" for p in build_pods(real_cluster, ns, name)), 180,
         "the kaniko Pod to run")
    api.request("DELETE", f"jobs/{name}")
    done = terminal(api, name, 60)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED), done["status"]
    # the garbage collector and the kubelet remove the Job and its Pod; no validation Pod appears
    wait(lambda: real_cluster.get(ns, "job", obj.build_job_name(name)) is None, 60, "the build Job to go")
    wait(lambda: build_pods(real_cluster, ns, name) == [], 90, "the kaniko Pod to go")
    time.sleep(2)
    assert validation_pods(real_cluster, ns, name) == []
    assert reasons(events(api, name, 3))[-1] == Reason.CANCELLED


def test_build_deadline_is_enforced_by_the_job_controller(real_cluster, ns, server):
    """The build Job carries activeDeadlineSeconds; with the server down (nobody to cancel),
    the real Job controller stops kaniko at the deadline; the next server ends the job
    BuildTimedOut."""
    s = server("first").start()
    api = s.client()
    write_notebook(s.root / "nb.ipynb", ["print(1)"])
    job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {
        "requirements": [fresh("numpy==2.2.6")], "timeout": "6s"}}})
    name = job["metadata"]["name"]
    bj = wait(lambda: real_cluster.get(ns, "job", obj.build_job_name(name)), 60, "the build Job")
    assert bj["spec"]["activeDeadlineSeconds"] == 6
    s.kill()
    bj = wait(lambda: (lambda j: j if any(c["type"] == "Failed" and c["status"] == "True"
                                          for c in (j["status"].get("conditions") or [])) else None)(
        real_cluster.get(ns, "job", obj.build_job_name(name))), 120, "the Job controller to fail the Job")
    failed = [c for c in bj["status"]["conditions"] if c["type"] == "Failed"][0]
    assert failed["reason"] == "DeadlineExceeded", bj["status"]
    wait(lambda: all(p["status"].get("phase") in ("Failed", "Succeeded") or p["metadata"].get("deletionTimestamp")
                     for p in build_pods(real_cluster, ns, name)), 60, "kaniko to be stopped")
    again = server("second")
    again.root, again.data_dir, again.runtime, again.token = s.root, s.data_dir, s.runtime, s.token
    api2 = again.start().client()
    done = terminal(api2, name, 120)
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] in (Reason.BUILD_TIMED_OUT, Reason.BUILD_FAILED), st
    assert "DeadlineExceeded" in st["message"] or "did not finish within" in st["message"], st["message"]
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert validation_pods(real_cluster, ns, name) == []
    assert len(reasons(events(api2, name, 3))) == 3


def test_memory_limit_exceeded_is_reported_as_oomkilled(real_cluster, ns, server):
    s = server().start()
    api = s.client()
    write_notebook(s.root / "mem.ipynb", ["x = 1", "blob = bytearray(1024 * 1024 * 1024)\nprint(len(blob))"])
    job = api.request("POST", "jobs", {"notebook": {"path": "mem.ipynb"}, "podConfig": {
        "resources": {"limits": {"memory": "160Mi"}, "requests": {"memory": "64Mi"}}}})
    name = job["metadata"]["name"]
    done = terminal(api, name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
    assert "OOMKilled" in st["message"] and "memory" in st["message"], st["message"]
    assert st["validationStatus"]["reason"] == "OOMKilled", st["validationStatus"]
    (pod,) = validation_pods(real_cluster, ns, name)
    assert runner_terminated(pod, obj.RUNNER_CONTAINER)["reason"] == "OOMKilled"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "160Mi"


def test_server_restarted_mid_build_finishes_with_one_event_per_transition(real_cluster, ns, server):
    s = server("first").start()
    api = s.client()
    write_notebook(s.root / "nb.ipynb", ["import six\nprint(six.__version__)"])
    job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"},
                                       "podConfig": {"buildConfig": {"requirements": [fresh("six==1.16.0"), "tabulate==0.9.0"]}}})
    name = job["metadata"]["name"]
    wait(lambda: (job_of(api, name).get("status") or {}).get("phase") == Phase.BUILDING, 60, "Building")
    wait(lambda: real_cluster.get(ns, "job", obj.build_job_name(name)), 60, "the build Job")
    s.kill()
    again = server("second")
    again.root, again.data_dir, again.runtime, again.token = s.root, s.data_dir, s.runtime, s.token
    api2 = again.start().client()
    done = terminal(api2, name)
    assert done["status"]["phase"] == Phase.SUCCEEDED, json.dumps(done["status"], indent=1)
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING,
                            Phase.SUCCEEDED]
    assert reasons(events(api2, name, 5)) == ALL_OK
    # exactly one build Job and one validation Pod: the second server adopted, never duplicated
    assert len(build_pods(real_cluster, ns, name)) == 1
    assert len(validation_pods(real_cluster, ns, name)) == 1
    evs = real_cluster.get(ns, "events.events.k8s.io")["items"]
    mine = [e for e in evs if (e.get("regarding") or {}).get("name") == name]
    assert sorted(e["reason"] for e in mine) == sorted(ALL_OK)
