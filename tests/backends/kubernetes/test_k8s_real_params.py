"""spec.parameters on the REAL single-node cluster (tests/real_cluster.py): the runner in
the validation Pod injects the parameters cell, computes with the given values, and the
golden comparison (a golden copy made without parameters) leaves the injected cell out.

Run: ``.venv/bin/python -m pytest tests/test_k8s_real_params.py`` (the cluster must be up)."""

from __future__ import annotations

import json

import pytest
from helpers import wait, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.cluster

WAIT = 600.0  # a build (or its reuse) and a Pod on a loaded 2-core machine


def _terminal(api, name: str) -> dict:
    seen: dict = {}

    def terminal() -> dict | None:
        seen["job"] = job = api.request("GET", f"jobs/{name}")
        return job if (job.get("status") or {}).get("phase") in (Phase.SUCCEEDED, Phase.FAILED) else None

    return wait(terminal, WAIT, lambda: f"{name} to end: {json.dumps(seen['job'].get('status'), indent=1)}", interval=1)


def test_parameters_in_the_validation_pod(real_cluster, tmp_path):
    ns = real_cluster.namespace()
    server = real_cluster.server(tmp_path, ns).start()
    try:
        api = server.client()
        sources = ["epochs = 10", "print('training for', epochs, 'epochs')", "assert epochs == 1, epochs"]
        nb = write_notebook(server.root / "train.ipynb", sources, tags={0: ["parameters"]})
        golden = json.loads(nb.read_text())  # as its author ran it with epochs = 1: no injected cell
        golden["cells"][0]["source"] = "epochs = 1"
        for i, cell in enumerate(golden["cells"]):
            cell["execution_count"] = i + 1
        golden["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "training for 1 epochs\n"}]
        (server.root / "golden.ipynb").write_text(json.dumps(golden))

        job = api.request("POST", "jobs", {"notebook": {"path": "train.ipynb"},
                                           "goldenNotebook": {"path": "golden.ipynb"},
                                           "parameters": {"epochs": 1}})
        name = job["metadata"]["name"]
        done = _terminal(api, name)
        st = done["status"]
        assert st["phase"] == Phase.SUCCEEDED, json.dumps(st, indent=1)
        cmp = st["comparisonResult"]
        assert (cmp["result"], cmp["mismatchedCells"], cmp["matchedCells"]) == ("matched", 0, 3), cmp
        assert cmp["tolerance"] == {"absolute": 1e-4, "relative": 0.0}
        assert [r["cellIndex"] for r in st["results"]] == [0, 1, 2]  # the submitted notebook's cells

        # the Pod ran the runner with the parameters; its executed notebook holds the injected cell
        pods = real_cluster.get(ns, "pods", "-l",
                                f"nbvalidation.dev/job={name},nbvalidation.dev/component=validation")["items"]
        (ctr,) = [c for p in pods for c in p["spec"]["containers"] if c["name"] == obj.RUNNER_CONTAINER]
        assert '--parameters={"epochs":1}' in ctr["command"] + ctr.get("args", [])
        executed = api.request("GET", f"jobs/{name}/notebook")
        assert executed["cells"][1]["metadata"]["tags"] == ["injected-parameters"]
        assert "".join(executed["cells"][1]["source"]) == "# Parameters\nepochs = 1\n"

        # without the parameter the same notebook fails in its own cell 2 (computing with 10)
        job = api.request("POST", "jobs", {"notebook": {"path": "train.ipynb"}})
        st = _terminal(api, job["metadata"]["name"])["status"]
        assert (st["phase"], st["failedCellIndex"]) == (Phase.FAILED, 2), json.dumps(st, indent=1)
    finally:
        server.stop()
