"""The verdict cache on the REAL single-node cluster (tests/real_cluster.py): `jupyter
nbvalidation run` through the project's `jupyter server` with ``backend = "kubernetes"``.
A second run over an unchanged folder creates no job for a notebook that succeeded and
reports it unchanged with its earlier job; editing one notebook runs exactly that one again;
a Failed job never stands in. (What moves the environment, a base image or a built image the
registry serves at another digest, is tested against a fake registry in test_k8s_backend.py.)

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_cache.py``
"""

from __future__ import annotations

import json
import uuid

import nbformat
import pytest
from helpers import cli, write_notebook

pytestmark = pytest.mark.cluster

WAIT = 900  # s: a cold kaniko build and three validation Pods on a loaded 2-core machine


def run(server, *args: str) -> tuple[int, dict[str, dict]]:
    proc = cli("run", "nbs", "-j", "2", "-o", "json", "--server", server.url, *args, cwd=server.root, timeout=WAIT,
               env={"JUPYTER_TOKEN": server.token})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, {row["notebook"]: row for row in json.loads(proc.stdout)}


def ran(rows: dict[str, dict]) -> set[str]:
    return {nb for nb, row in rows.items() if row["verdict"] != "Unchanged"}


def job_count(server) -> int:
    return len(server.client().request("GET", "jobs", params={"limit": "100"})["items"])


def test_run_on_kubernetes_reports_unchanged_notebooks_and_reruns_exactly_an_edited_one(real_cluster, tmp_path):
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        nbs = server.root / "nbs"
        marker = uuid.uuid4().hex[:12]  # a requirement set no image was built for yet: the first run builds
        (nbs / "requirements.txt").parent.mkdir(parents=True)
        (nbs / "requirements.txt").write_text(f'six==1.16.0; platform_machine != "nbv-{marker}"\n')
        write_notebook(nbs / "six.ipynb", ["import six\nprint(six.__name__)"])
        write_notebook(nbs / "plain.ipynb", ["print('plain')"])
        write_notebook(nbs / "fails.ipynb", ["raise ValueError('never cached')"])
        everything = {"nbs/six.ipynb", "nbs/plain.ipynb", "nbs/fails.ipynb"}

        code, rows = run(server)  # one kaniko build, shared by the three jobs; three validation Pods
        assert code == 1 and ran(rows) == everything, rows
        assert rows["nbs/six.ipynb"]["verdict"] == rows["nbs/plain.ipynb"]["verdict"] == "Succeeded", rows
        first = {nb: row["job"] for nb, row in rows.items()}
        count = job_count(server)
        assert count == 3

        # nothing changed: the two that succeeded are unchanged with their earlier jobs; the failed one runs
        code, rows = run(server)
        assert ran(rows) == {"nbs/fails.ipynb"}, rows
        for nb in ("nbs/six.ipynb", "nbs/plain.ipynb"):
            assert rows[nb]["job"] == first[nb], rows[nb]
        assert job_count(server) == count + 1

        # an edited notebook runs again, alone (in the image built before: no build)
        nb = nbformat.read(nbs / "plain.ipynb", as_version=4)
        nb.metadata["edited"] = 1
        nbformat.write(nb, str(nbs / "plain.ipynb"))
        code, rows = run(server)
        assert ran(rows) == {"nbs/plain.ipynb", "nbs/fails.ipynb"}, rows
        assert rows["nbs/plain.ipynb"]["verdict"] == "Succeeded", rows["nbs/plain.ipynb"]
        assert rows["nbs/six.ipynb"]["job"] == first["nbs/six.ipynb"]
        assert job_count(server) == count + 3
    finally:
        server.stop()
