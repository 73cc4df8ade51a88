"""Why it turned red, on the REAL single-node cluster (issue 22): the drift case of
tests/test_bisect.py with every build a kaniko image. Wheels in a --find-links folder inside the
root travel with each job (local_sources.py); the validation Pod's runner prints what its kernel
had, which is the job's environment record. Green with the old wheels, red once new ones appear:
the change summary names the two upgrades and no cell change, the lock of the green job pins the
old versions, and the server's search (the lab's Find the cause) names nbvdrifta alone, each step
a probe job built as an image of its own pins; asked again, every step reuses the image built for
the same pins; ``run --constraints-from-last-success`` against the server is green again (the
image build installs with pip's -c).

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_drift.py``
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import job_of, make_wheel, wait, write_notebook

from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.cluster

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"
WAIT = 600.0  # a kaniko build on a loaded 2-core machine, then the Pods


def test_drift_is_recorded_summarised_pinned_and_bisected_on_the_real_node(real_cluster, tmp_path):
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        api = server.client()
        proj = server.root / "proj"
        (proj / "wheels").mkdir(parents=True)
        for name in ("nbvdrifta", "nbvdriftb"):
            (proj / "wheels" / f"{name}-1.0-py3-none-any.whl").write_bytes(make_wheel(name, "1.0", "VALUE = 1\n"))
        (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdrifta\nnbvdriftb\n")  # unpinned
        write_notebook(proj / "nb.ipynb", ["import nbvdrifta, nbvdriftb", "assert nbvdrifta.VALUE == 1"])

        def validate() -> dict:
            name = api.request("POST", "jobs", {"notebook": {"path": "proj/nb.ipynb"}})["metadata"]["name"]
            return wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
                job_of(api, name)), WAIT, f"job {name} to end")

        green = validate()
        assert green["status"]["phase"] == Phase.SUCCEEDED, json.dumps(green["status"], indent=1)
        g = green["metadata"]["name"]
        record = api.request("GET", f"jobs/{g}/environment")
        assert record["environment"]["kind"] == "built" and record["environment"]["image"].startswith(
            green["status"]["buildStatus"]["imageReference"].split("@")[0]), record["environment"]
        versions = {d["name"]: d["version"] for d in record["distributions"]}
        assert versions["nbvdrifta"] == versions["nbvdriftb"] == "1.0" and "ipykernel" in versions, versions
        assert record["python"]["version"].startswith("3."), record["python"]
        assert "@sha256:" in record["environment"]["baseImage"], record["environment"]  # what it was built FROM
        lock = api.request("GET", f"jobs/{g}/lock", raw=True)
        assert "nbvdrifta==1.0" in lock and "nbvdriftb==1.0" in lock and f"--find-links {proj}/wheels" in lock, lock

        for name in ("nbvdrifta", "nbvdriftb"):
            (proj / "wheels" / f"{name}-2.0-py3-none-any.whl").write_bytes(make_wheel(name, "2.0", "VALUE = 2\n"))
        red = validate()
        assert red["status"]["phase"] == Phase.FAILED, json.dumps(red["status"], indent=1)
        r = red["metadata"]["name"]
        since = api.request("GET", f"jobs/{r}/changes")
        assert since["since"]["name"] == g, since
        moved = sorted((d["name"], d["from"], d["to"]) for d in since["packages"]["upgraded"])
        assert moved == [("nbvdrifta", "1.0", "2.0"), ("nbvdriftb", "1.0", "2.0")], since["packages"]
        assert not since["packages"]["added"] and not since["packages"]["removed"], since["packages"]
        assert since["cells"]["changed"] is False and since["environmentChanged"] is True, since

        started = api.request("POST", f"jobs/{r}/bisect", {}, params={"maxSteps": 6})
        assert started["state"] == "running", started
        deadline = time.monotonic() + 4 * WAIT
        seen = {"doc": started}

        def search_over() -> dict | None:
            if seen["doc"]["state"] == "running":
                seen["doc"] = api.request("GET", f"jobs/{r}/bisect")
            return seen["doc"] if seen["doc"]["state"] != "running" else None

        doc = wait(search_over, 4 * WAIT, lambda: f"the search to end: {json.dumps(seen['doc'], indent=1)}", interval=2)
        assert doc["state"] == "finished", json.dumps(doc, indent=1)
        result = doc["result"]
        assert result["result"] == "found", json.dumps(doc, indent=1)
        assert result["culprits"] == [{"name": "nbvdrifta", "from": "1.0", "to": "2.0"}], result
        assert len(doc["steps"]) == result["validations"] <= 6, doc["steps"]
        assert doc["steps"][0]["text"].startswith("step 1/6: the last success’s pins → Succeeded (job "), doc["steps"]
        # the steps were probes: the notebook's jobs are still its two
        listed = api.request("GET", "jobs", params={"notebook": "proj/nb.ipynb"})["items"]
        assert [j["metadata"]["name"] for j in listed] == [r, g]

        # asked again, the search meets the same pins: every step's image is the one built before
        seen["doc"] = api.request("POST", f"jobs/{r}/bisect", {}, params={"maxSteps": 6})
        doc = wait(search_over, deadline + 2 * WAIT - time.monotonic(),
                   lambda: f"the search to end: {json.dumps(seen['doc'])}", interval=2)
        assert doc["state"] == "finished" and doc["result"]["culprits"] == result["culprits"], json.dumps(doc)
        for step in doc["steps"]:
            reasons = [t.get("reason") for t in (job_of(api, step["job"]).get("status") or {}).get("transitions", [])]
            assert "BuildReused" in reasons, (step["job"], reasons)

        # pin what passed: the CLI against this server, with the last success's versions as
        # constraints (pip's -c in the image build), is green while the 2.0 wheels are there
        kept = subprocess.run([JUPYTER, "nbvalidation", "run", "proj/nb.ipynb", "--constraints-from-last-success",
                               "-o", "json", "--server", server.url], cwd=server.root, capture_output=True,
                              text=True, timeout=2 * WAIT, stdin=subprocess.DEVNULL,
                              env={**os.environ, "JUPYTER_TOKEN": server.token})
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert f"versions of its last success (job {g}" in kept.stderr, kept.stderr
        assert json.loads(kept.stdout)[0]["verdict"] == "Succeeded", kept.stdout
        newest = api.request("GET", "jobs", params={"notebook": "proj/nb.ipynb"})["items"][0]
        assert newest["metadata"]["name"] not in (r, g)
        assert {"nbvdrifta==1.0", "nbvdriftb==1.0"} <= set(newest["spec"]["podConfig"]["buildConfig"]["constraints"])
        pinned = api.request("GET", f"jobs/{newest['metadata']['name']}/environment")
        assert {d["name"]: d["version"] for d in pinned["distributions"]}["nbvdrifta"] == "1.0", pinned
        assert "nbvdrifta==1.0" in pinned["environment"]["constraints"], pinned["environment"]
    finally:
        server.stop()
