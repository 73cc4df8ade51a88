"""Environment discovery on the REAL single-node cluster (issue 21): a repository that declares
its environment once, at its root, validates a notebook two folders down with no configuration —
the root's requirements.txt travels as the build's requirement lines and kaniko installs them; the
verdict says which file it used. A project (pyproject.toml at the root) travels with the job, packed
in its snapshot, and is installed into the image with the extras the spec asks for; the root's
apt.txt goes into the image as Debian packages, as repo2docker does. A project that cannot travel
(a link out of it, over the bound) is refused at submit, naming why.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_discovery.py``
"""

from __future__ import annotations

import json
import os

import pytest
from helpers import job_of, wait, write_notebook

from jupyter_nbvalidation.clients.http import ClientError
from jupyter_nbvalidation.core.model import Phase, Reason

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

    finally:
        server.stop()


def test_a_project_with_extras_and_its_apt_txt_are_built_into_the_image(real_cluster, tmp_path):
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        api = server.client()
        proj = server.root / "proj"
        (proj / ".git").mkdir(parents=True)
        (proj / "pyproject.toml").write_text(
            '[project]\nname = "nbvproj"\nversion = "1.0"\n'
            '[project.optional-dependencies]\nsix = ["six==1.16.0"]\n'
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
            '[tool.setuptools]\npackages = ["nbvproj"]\n')
        (proj / "nbvproj").mkdir()
        (proj / "nbvproj" / "__init__.py").write_text("VALUE = 42\n")
        (proj / "apt.txt").write_text("# a tool the notebook runs\njq\n")
        write_notebook(proj / "docs" / "nb.ipynb", [
            "import subprocess\nimport nbvproj, six\nprint(nbvproj.VALUE, six.__version__)",
            "print(subprocess.run(['jq', '--version'], capture_output=True, text=True, check=True).stdout.strip()[:3])"])
        before = sorted(p.relative_to(proj).as_posix() for p in proj.rglob("*"))
        name = api.request("POST", "jobs", {"notebook": {"path": "proj/docs/nb.ipynb"},
                                            "podConfig": {"buildConfig": {"extras": ["six"]}}})["metadata"]["name"]
        done = wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
            job_of(api, name)), WAIT, f"job {name} to end")
        st = done["status"]
        assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
        assert "project nbvproj with extras six" in st["environment"], st["environment"]
        assert "1 system package from proj/apt.txt (jq)" in st["environment"], st["environment"]
        assert "not run here" not in st["environment"], st["environment"]
        executed = api.request("GET", f"jobs/{name}/notebook")
        outs = ["".join(c["outputs"][0]["text"]).strip() for c in executed["cells"]]
        assert outs == ["42 1.16.0", "jq-"], outs
        # the build ran from the packed copy: the repository is as it was (no build/, no egg-info)
        assert sorted(p.relative_to(proj).as_posix() for p in proj.rglob("*")) == before

        # what cannot travel is refused at submit, naming why; no job is made
        jobs_before = len(api.request("GET", "jobs")["items"])
        (proj / "nbvproj" / "secrets").symlink_to("/etc")
        with pytest.raises(ClientError) as e:
            api.request("POST", "jobs", {"notebook": {"path": "proj/docs/nb.ipynb"}})
        assert e.value.status == 400 and "is a link to /etc" in str(e.value), str(e.value)
        (proj / "nbvproj" / "secrets").unlink()
        (proj / "nbvproj" / "blob.bin").write_bytes(os.urandom(600 * 1024))
        with pytest.raises(ClientError) as e:
            api.request("POST", "jobs", {"notebook": {"path": "proj/docs/nb.ipynb"}})
        assert e.value.status == 413 and "travel with the job" in str(e.value), str(e.value)
        assert len(api.request("GET", "jobs")["items"]) == jobs_before
    finally:
        server.stop()


def test_a_python_the_base_image_does_not_have_fails_the_build_saying_so(real_cluster, tmp_path):
    """runtime.txt asks for a Python the base image (Debian's 3.11) is not: the base image's Python is
    known only in the build, which checks it before installing anything and fails naming both —
    never a verdict from a Python the repository did not declare."""
    server = real_cluster.server(tmp_path, real_cluster.namespace()).start()
    try:
        api = server.client()
        repo = server.root / "old"
        (repo / ".git").mkdir(parents=True)
        (repo / "requirements.txt").write_text("six==1.16.0\n")
        (repo / "runtime.txt").write_text("python-3.9\n")
        write_notebook(repo / "nb.ipynb", ["import six"])
        name = api.request("POST", "jobs", {"notebook": {"path": "old/nb.ipynb"}})["metadata"]["name"]
        done = wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
            job_of(api, name)), WAIT, f"job {name} to end")
        st = done["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED), json.dumps(st, indent=1)
        assert "runtime.txt (old/runtime.txt) asks for Python ==3.9.*; the base image has Python 3.11" \
            in st["message"], st["message"]
        # a specifier that is not one is refused at submit, on this backend too
        (repo / "runtime.txt").unlink()
        (repo / "requirements.txt").unlink()
        (repo / "pyproject.toml").write_text('[project]\nname = "old"\nversion = "1"\nrequires-python = ">=3.x"\n')
        with pytest.raises(ClientError) as e:
            api.request("POST", "jobs", {"notebook": {"path": "old/nb.ipynb"}})
        assert e.value.status == 400 and "is not a version specifier" in str(e.value), str(e.value)
    finally:
        server.stop()
