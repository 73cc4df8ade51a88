"""The notebook's folder travels on the REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``; issue 19 point 6): without ``spec.inputFiles`` a notebook reads a
sibling ``data.csv`` (and a file in a subfolder) by relative path in its validation Pod, as it
does locally; a relative path that is not there fails at its cell, and the message says what
travelled (the notebook's folder), never only "No such file or directory".

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_folder.py``
"""

from __future__ import annotations

import json

import pytest
from helpers import cell_outputs as outputs
from helpers import job_of, wait, write_notebook

from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

WAIT = 600.0  # a kaniko build (the kernel's venv) on a loaded 2-core machine, then the Pods


def test_sibling_files_travel_without_input_files_and_a_missing_one_says_what_travelled(real_cluster, tmp_path):
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        api = server.client()
        proj = server.root / "proj"
        write_notebook(proj / "reads.ipynb", [
            "import csv\nprint(list(csv.reader(open('data.csv'))))",
            "print(open('sub/more.txt').read().strip())",
        ])
        (proj / "data.csv").write_text("a,b\n1,2\n")
        (proj / "sub").mkdir()
        (proj / "sub" / "more.txt").write_text("more beside\n")
        write_notebook(proj / "misses.ipynb", ["print('first')", "open('missing.csv')"])
        names = {nb: api.request("POST", "jobs", {"notebook": {"path": f"proj/{nb}.ipynb"}})["metadata"]["name"]
                 for nb in ("reads", "misses")}
        done = {nb: wait(lambda n=n: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL
                                      else None)(job_of(api, n)), WAIT, f"job {n} to end")
                for nb, n in names.items()}

        st = done["reads"]["status"]
        assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
        executed = api.request("GET", f"jobs/{names['reads']}/notebook")
        assert outputs(executed) == ["[['a', 'b'], ['1', '2']]\n", "more beside\n"], outputs(executed)

        st = done["misses"]["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
        assert st["failedCellIndex"] == 1, st
        message = st["message"]
        print(f"{names['misses']}: {message}")
        assert message.startswith("Cell 2 raised FileNotFoundError: [Errno 2] No such file or directory: "
                                  "'missing.csv' ('missing.csv' is relative to the kernel's working folder, which "
                                  "holds the notebook's folder (proj) and everything below it as it was at submit"), \
            message
        assert "'missing.csv' was not among them" in message and "spec.inputFiles" in message, message
    finally:
        server.stop()
