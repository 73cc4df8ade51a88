"""Environment discovery on the REAL single-node cluster (issue 21): a repository that declares
its environment once, at its root, validates a notebook two folders down with no configuration —
the root's requirements.txt travels as the build's requirement lines and kaniko installs them; the
verdict says which file it used. A project install (pyproject.toml at the root) is refused at submit
with a 400 naming the file: the image build cannot read the server's files (yet).

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_discovery.py``
"""

from __future__ import annotations

import json

import pytest
from helpers import job_of, wait, write_notebook

from jupyter_nbvalidation.client import ClientError
from jupyter_nbvalidation.model import Phase, Reason

pytestmark = pytest.mark.cluster

WAIT = 600.0  # a kaniko build on a loaded 2-core machine, then the Pods


def test_a_root_requirements_txt_builds_the_image_of_a_notebook_two_folders_down(real_cluster, tmp_path):
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        api = server.client()
        repo = server.root / "repo"
        (repo / ".git").mkdir(parents=True)  # the repository root
        (repo / "requirements.txt").write_text("six==1.16.0\n")
        write_notebook(repo / "notebooks" / "sub" / "nb.ipynb", ["import six\nprint(six.__version__)"])
        name = api.request("POST", "jobs", {"notebook": {"path": "repo/notebooks/sub/nb.ipynb"}})["metadata"]["name"]
        done = wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
            job_of(api, name)), WAIT, f"job {name} to end")
        st = done["status"]
        assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
        assert st["environment"] == "1 requirement from requirements.txt at the repository root (repo/requirements.txt)", \
            st["environment"]
        executed = api.request("GET", f"jobs/{name}/notebook")
        assert "".join(executed["cells"][0]["outputs"][0]["text"]).strip() == "1.16.0"

        (server.root / "proj" / ".git").mkdir(parents=True)
        (server.root / "proj" / "pyproject.toml").write_text('[project]\nname = "nbvproj"\nversion = "1.0"\n')
        write_notebook(server.root / "proj" / "docs" / "nb.ipynb", ["import nbvproj"])
        with pytest.raises(ClientError) as e:
            api.request("POST", "jobs", {"notebook": {"path": "proj/docs/nb.ipynb"}})
        assert e.value.status == 400 and "pyproject.toml" in str(e.value), str(e.value)
    finally:
        server.stop()
