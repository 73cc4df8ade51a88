"""A deleted validation Pod on the REAL single-node cluster (tests/real_cluster.py, ``bash
tools/cluster/up.sh``) is retried, never blamed on the notebook (issue 19, point 3).

A real `jupyter server` with ``backend = "kubernetes"`` validates a notebook with a slow cell;
once the job is ValidationRunning and its progress shows the slow cell running, the test
deletes the validation Pod through the API, as ``kubectl delete pod`` does: the apiserver
sets its deletionTimestamp, the real kubelet sends SIGTERM, the runner reports the cell it
was in as stopped by SIGTERM. The job must get a ValidationRetried event, a fresh Pod
``nvj-<name>-validate-r1``, and end with the notebook's true verdict: Succeeded for a
notebook that passes, ValidationFailed at its real failing cell for one that fails.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_faults.py``
"""

from __future__ import annotations

import json
import time

import pytest
from helpers import job_of, phases, reasons, wait, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

WAIT = 600.0  # a cold kaniko build on a loaded 2-core machine, then two runs of the slow cell
SLOW = 20  # seconds of the slow cell: the deletion lands in it
RETRIED = "ValidationRetried"


def validation_pods(cluster, ns: str, name: str) -> list[dict]:
    got = cluster.get(ns, "pods", "-l", f"nbvalidation.dev/job={name},nbvalidation.dev/component=validation")
    return got["items"] if got else []


@pytest.fixture(scope="module")
def setup(real_cluster, tmp_path_factory):
    """One server for both cases (the second reuses the first one's image)."""
    tmp = tmp_path_factory.mktemp("faults")
    ns = real_cluster.namespace()
    server = real_cluster.server(tmp, ns, NBValidation={"retry_backoff": 1.0}).start()
    try:
        yield real_cluster, ns, server
    finally:
        server.stop()


def delete_mid_cell(setup, cells: list[str], slow_index: int) -> tuple[str, dict, list[dict]]:
    """Submit, wait until the slow cell runs in the first Pod, delete that Pod through the
    API (graceful, as kubectl), and follow the job to its end: (name, job, events)."""
    cluster, ns, server = setup
    api = server.client()
    nb = f"nb-{len(cells)}-{slow_index}-{time.monotonic_ns()}.ipynb"
    write_notebook(server.root / nb, cells)
    name = api.request("POST", "jobs", {"notebook": {"path": nb}})["metadata"]["name"]

    def in_slow_cell():
        st = job_of(api, name).get("status") or {}
        assert st.get("phase") not in Phase.TERMINAL, json.dumps(st, indent=1)
        p = st.get("progress") or {}
        return st if st.get("phase") == Phase.VALIDATION_RUNNING and p.get("currentCellIndex") == slow_index else None

    wait(in_slow_cell, WAIT, f"job {name} to run its slow cell")
    first = obj.validation_pod_name(name)
    deleted_at = time.monotonic()
    cluster.kubectl("delete", "pod", first, "--wait=false", namespace=ns)
    # what a client sees meanwhile: never a verdict from the deleted Pod
    done = wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
        job_of(api, name)), WAIT, f"job {name} to end")
    # every transition's event; the terminal one is posted after the status that ends the job,
    # so wait for it (counting alone returned early once: the retry's event made up the number)
    final = done["status"]["transitions"][-1]["reason"]
    evs = wait(lambda: (lambda e: e if final in reasons(e) else None)(
        api.request("GET", f"jobs/{name}/events")["items"]), 30, f"the {final} event of {name}")
    print(f"{name}: deletion -> verdict {time.monotonic() - deleted_at:.1f} s")
    return name, done, evs


def check_retried(setup, name: str, done: dict, evs: list[dict]) -> list[dict]:
    cluster, ns, _ = setup
    st = done["status"]
    # events = transitions + exactly one ValidationRetried, right after ValidationStarted
    got = reasons(evs)
    assert got.count(RETRIED) == 1, got
    assert len(got) == len(st["transitions"]) + 1, (got, phases(done))
    assert got[got.index(RETRIED) - 1] == Reason.VALIDATION_STARTED, got
    retried = evs[got.index(RETRIED)]
    assert retried["type"] == "Warning", retried
    assert retried["note"].startswith(f"The validation Pod {obj.validation_pod_name(name)} was deleted"), retried
    assert phases(done)[-2:] == [Phase.VALIDATION_RUNNING, st["phase"]]
    assert st["validationRetries"] == 1, st
    assert "SIGTERM" not in json.dumps(st), json.dumps(st, indent=1)
    # the retry ran in a fresh Pod, which the kubelet ran to its end; the deleted one is gone
    pods = {p["metadata"]["name"]: p for p in validation_pods(cluster, ns, name)}
    retry = pods.get(obj.validation_pod_name(name, 1))
    assert retry is not None, list(pods)
    assert retry["metadata"]["name"] == f"nvj-{name}-validate-r1"
    assert retry["status"]["phase"] in ("Succeeded", "Failed"), retry["status"]
    first = pods.get(obj.validation_pod_name(name))
    assert first is None or first["metadata"].get("deletionTimestamp"), first
    # the progress is the run's end, no cell shown running
    assert (st.get("progress") or {}).get("currentCellIndex") is None, st.get("progress")
    return got


def test_a_pod_deleted_mid_cell_is_retried_and_the_job_succeeds(setup):
    cells = ["import time", f"time.sleep({SLOW})", "print('done')"]
    name, done, evs = delete_mid_cell(setup, cells, slow_index=1)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
    assert st.get("failedCellIndex") is None
    got = check_retried(setup, name, done, evs)
    assert got[-1] == Reason.VALIDATION_SUCCEEDED
    assert all(r.get("status") == "Success" for r in st["results"]), st["results"]


def test_a_truly_failing_notebook_still_fails_at_its_cell_after_a_deletion(setup):
    cells = ["import time", f"time.sleep({SLOW})", "1 / 0", "print('never')"]
    name, done, evs = delete_mid_cell(setup, cells, slow_index=1)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
    assert st["failedCellIndex"] == 2 and st["message"] == "Cell 3 raised ZeroDivisionError: division by zero", st
    (failed,) = [r for r in st["results"] if r.get("status") == "Failure"]
    assert failed["errorName"] == "ZeroDivisionError"
    got = check_retried(setup, name, done, evs)
    assert got[-1] == Reason.VALIDATION_FAILED


def test_an_image_that_does_not_exist_ends_infrastructure_failed_at_once(setup):
    """The real kubelet's ErrImagePull for an image the registry does not have: no notebook
    verdict, no retry, no waiting out image_pull_deadline."""
    cluster, ns, server = setup
    api = server.client()
    write_notebook(server.root / "missing.ipynb", ["print(1)"])
    image = f"{cluster.env['NBV_REGISTRY']}/nosuch-{time.monotonic_ns()}:1"
    started = time.monotonic()
    name = api.request("POST", "jobs", {"notebook": {"path": "missing.ipynb"}, "podConfig": {
        "containerImage": image, "buildConfig": {"enabled": False}}})["metadata"]["name"]
    done = wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
        job_of(api, name)), 120, f"job {name} to end")
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, "InfrastructureFailed"), json.dumps(st, indent=1)
    assert st["message"].startswith(f"The validation Pod could not pull {image}: the image does not exist"), st
    assert st.get("failedCellIndex") is None and not st.get("validationRetries")
    assert time.monotonic() - started < 120
    evs = wait(lambda: (lambda e: e if len(e) >= len(st["transitions"]) else None)(
        api.request("GET", f"jobs/{name}/events")["items"]), 30, f"the events of {name}")
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, "InfrastructureFailed"]
