"""Why it turned red (issue 22): a job against its notebook's last success says what changed —
cells, golden, requirements, input files, options, packages, Python. The drift case end to end:
a new release of an unpinned dependency appears (a wheel added to the --find-links folder),
the notebook fails with no edit, and the summary names the package and "no cell changed".
Real Jupyter server, real local backend, real uv builds and kernels."""

from __future__ import annotations

import json

from helpers import cli, make_wheel, rest_wait_terminal, write_notebook
from helpers import rest_call as call

import jupyter_nbvalidation.why_red.changes as changes
from jupyter_nbvalidation.cli.render import changes_block
from jupyter_nbvalidation.core.model import Phase


def _nb(*sources: str) -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "source": s} for s in sources]}).encode()


def _rec(python: str = "3.11.7", **dists: str) -> dict:
    return {"python": {"implementation": "CPython", "version": python},
            "distributions": [{"name": n, "version": v, "source": {"kind": "index"}} for n, v in dists.items()]}


def _side(name: str, nb: bytes, record: dict | None, **files: bytes) -> changes.Side:
    return changes.Side({"metadata": {"name": name}, "spec": {"notebook": {"path": "a.ipynb"}},
                         "status": {"completionTime": "2026-12-01T00:00:00Z"}},
                        {"notebook.ipynb": nb, **files}, record)


def test_cells_are_numbered_as_jupyterlab_numbers_them():
    old = _nb("a", "b", "c", "d")
    assert changes.cell_changes(old, old) == {"added": [], "removed": [], "edited": [], "changed": False}
    assert changes.cell_changes(old, _nb("a", "B", "c", "d")) == {
        "added": [], "removed": [], "edited": [2], "changed": True}
    assert changes.cell_changes(old, _nb("a", "new", "b", "c", "d"))["added"] == [2]
    assert changes.cell_changes(old, _nb("a", "c", "d"))["removed"] == [2]  # as it was numbered
    assert changes.cell_changes(old, b"not json") is None


def test_packages_python_and_the_sentence():
    before = _side("nb-1", _nb("import pandas"), _rec(pandas="2.2.3", numpy="2.1.0", six="1.16.0", old="1"),
                   **{"requirements.txt": b"pandas\nnumpy\n", "inputs/data.csv": b"1"})
    after = _side("nb-2", _nb("import pandas"), _rec(pandas="3.0.0", numpy="2.0.0", six="1.16.0", new="2"),
                  **{"requirements.txt": b"pandas\nnumpy\n", "inputs/data.csv": b"1"})
    s = changes.summarize(before, after)
    pk = s["packages"]
    assert pk["upgraded"] == [{"name": "pandas", "from": "2.2.3", "to": "3.0.0"}]
    assert pk["downgraded"] == [{"name": "numpy", "from": "2.1.0", "to": "2.0.0"}]
    assert (pk["added"], pk["removed"]) == ([{"name": "new", "version": "2"}], [{"name": "old", "version": "1"}])
    assert s["cells"]["changed"] is False and s["requirements"]["changed"] is False
    assert s["inputFiles"]["changed"] is False and s["golden"] is False and s["python"] is None
    assert s["sentence"] == "pandas 2.2.3 → 3.0.0, numpy 2.1.0 → 2.0.0, +new 2, -old 1; no cell changed"
    edited = _side("nb-3", _nb("import pandas as pd"), _rec("3.12.1", pandas="2.2.3", numpy="2.1.0", six="1.16.0",
                                                              old="1"),
                   **{"requirements.txt": b"pandas<3\nnumpy\n", "inputs/data.csv": b"2", "golden.ipynb": b"{}"})
    s = changes.summarize(before, edited)
    assert s["python"] == {"from": "CPython 3.11.7", "to": "CPython 3.12.1"}
    assert s["requirements"]["lines"] == ["-pandas", "+pandas<3"] and s["inputFiles"]["edited"] == ["data.csv"]
    assert s["sentence"] == ("Python CPython 3.11.7 → CPython 3.12.1; requirements changed (-pandas, +pandas<3); "
                             "the golden notebook changed; input files changed; cells edited 1")
    no_record = changes.summarize(before, _side("nb-4", _nb("import pandas"), None))
    assert no_record["packages"] is None and "environments not compared" in no_record["sentence"]
    # a built image's base (Kubernetes records it by digest): named when it moved, not otherwise
    moved_base = _rec(pandas="2.2.3", numpy="2.1.0", six="1.16.0", old="1")
    moved_base["environment"] = {"kind": "built", "baseImage": "reg/base@sha256:bbb"}
    before.record["environment"] = {"kind": "built", "baseImage": "reg/base@sha256:aaa"}
    s = changes.summarize(before, _side("nb-5", _nb("import pandas"), moved_base,
                                        **{"requirements.txt": b"pandas\nnumpy\n", "inputs/data.csv": b"1"}))
    assert s["baseImage"] == {"from": "reg/base@sha256:aaa", "to": "reg/base@sha256:bbb"}
    assert s["sentence"] == ("base image reg/base@sha256:aaa → reg/base@sha256:bbb; no cell changed; same "
                             "packages"), s["sentence"]
    assert changes.summarize(before, before)["baseImage"] is None


async def test_a_new_release_of_an_unpinned_dependency_is_named_and_no_cell_changed(jp_fetch, jp_serverapp,
                                                                                    jp_root_dir):
    proj = jp_root_dir / "proj"
    (proj / "wheels").mkdir(parents=True)
    (proj / "wheels" / "nbvdriftpkg-1.0-py3-none-any.whl").write_bytes(make_wheel("nbvdriftpkg", "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdriftpkg\n")  # unpinned
    write_notebook(proj / "nb.ipynb", ["import nbvdriftpkg", "assert nbvdriftpkg.VALUE == 1, nbvdriftpkg.VALUE"])

    async def validate() -> dict:
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "proj/nb.ipynb"}})
        return await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 400)

    green = await validate()
    assert green["status"]["phase"] == Phase.SUCCEEDED, green["status"]
    first = await call(jp_fetch, "jobs", green["metadata"]["name"], "changes")
    assert first == {"since": None, "sentence": "no earlier success of this notebook"}

    # the dependency releases 2.0; nobody touches the notebook or its requirements
    (proj / "wheels" / "nbvdriftpkg-2.0-py3-none-any.whl").write_bytes(make_wheel("nbvdriftpkg", "2.0", "VALUE = 2\n"))
    red = await validate()
    assert red["status"]["phase"] == Phase.FAILED, red["status"]
    since = await call(jp_fetch, "jobs", red["metadata"]["name"], "changes")
    assert since["since"]["name"] == green["metadata"]["name"]
    assert since["packages"]["upgraded"] == [{"name": "nbvdriftpkg", "from": "1.0", "to": "2.0"}]
    assert sum(since["packages"]["counts"].values()) == 1  # nothing else moved
    assert since["cells"]["changed"] is False and since["requirements"]["changed"] is False
    assert since["environmentChanged"] is True
    assert since["sentence"] == "nbvdriftpkg 1.0 → 2.0; no cell changed"
    assert changes_block(since).startswith(f"\nSince the last success ({green['metadata']['name']}, ")

    # the notebook is fixed for 2.0: still compared with the last success, not with the failure
    write_notebook(proj / "nb.ipynb", ["import nbvdriftpkg", "assert nbvdriftpkg.VALUE == 2, nbvdriftpkg.VALUE"])
    fixed = await validate()
    assert fixed["status"]["phase"] == Phase.SUCCEEDED, fixed["status"]
    again = await call(jp_fetch, "jobs", fixed["metadata"]["name"], "changes")
    assert again["since"]["name"] == green["metadata"]["name"]
    assert again["sentence"] == "nbvdriftpkg 1.0 → 2.0; cells edited 2"


def test_run_says_what_changed_under_a_notebook_that_turned_red(tmp_path):
    """`run` (in this process, no server): under the table, JUnit and -o json carry the change summary."""
    import os
    import subprocess
    import xml.etree.ElementTree as ET

    proj, data = tmp_path / "proj", tmp_path / "data"
    (proj / "wheels").mkdir(parents=True)
    (proj / "wheels" / "nbvdriftpkg-1.0-py3-none-any.whl").write_bytes(make_wheel("nbvdriftpkg", "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdriftpkg\n")
    write_notebook(proj / "nb.ipynb", ["import nbvdriftpkg", "assert nbvdriftpkg.VALUE == 1"])
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}

    def run(*extra: str) -> subprocess.CompletedProcess:
        return cli("run", ".", "--local", "--data-dir", str(data), *extra, cwd=proj, timeout=600, env=env)

    first = run()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "What changed since their last success" not in first.stdout
    (proj / "wheels" / "nbvdriftpkg-2.0-py3-none-any.whl").write_bytes(make_wheel("nbvdriftpkg", "2.0", "VALUE = 2\n"))
    red = run("--junitxml", str(tmp_path / "r.xml"))
    assert red.returncode == 1, red.stdout + red.stderr
    tail = red.stdout.split("What changed since their last success:\n", 1)[1]
    assert tail.startswith("  nb.ipynb: since the last success (job ") and \
        "): nbvdriftpkg 1.0 → 2.0; no cell changed\n" in tail, red.stdout
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "r.xml").iter("property")}
    assert props["nbvalidation.sinceLastSuccess"].endswith("nbvdriftpkg 1.0 → 2.0; no cell changed"), props
    as_json = run("-o", "json", "--no-cache")
    (row,) = json.loads(as_json.stdout)
    assert row["verdict"] == "Failed" and row["sinceLastSuccess"]["packages"]["upgraded"] == [
        {"name": "nbvdriftpkg", "from": "1.0", "to": "2.0"}], row


def test_one_finder_of_the_last_success_newest_first_after_a_job_and_filtered():
    """why_red.changes.newest_in_phase: the service's "since the last success" and the CLI's
    lock / constraints find a notebook's last success with it (and bisect its last failure)."""
    from jupyter_nbvalidation.why_red.changes import newest_in_phase

    def job(name, phase, root="r"):
        return {"metadata": {"name": name, "root": root}, "status": {"phase": phase}}

    jobs = [job("j5", "Failed"), job("j4", "Succeeded", root="other"), job("j3", "Failed"),
            job("j2", "Succeeded"), job("j1", "Succeeded")]
    assert newest_in_phase(jobs, "Succeeded")["metadata"]["name"] == "j4"
    assert newest_in_phase(jobs, "Failed")["metadata"]["name"] == "j5"
    same_root = {"keep": lambda j: j["metadata"]["root"] == "r"}
    assert newest_in_phase(jobs, "Succeeded", **same_root)["metadata"]["name"] == "j2"
    assert newest_in_phase(jobs, "Succeeded", after="j2", **same_root)["metadata"]["name"] == "j1"
    assert newest_in_phase(jobs, "Failed", after="j5")["metadata"]["name"] == "j3"
    assert newest_in_phase(jobs, "Succeeded", after="j1") is None  # nothing older
    assert newest_in_phase(jobs, "Succeeded", after="gone") is None  # the job is not listed
    assert newest_in_phase([], "Succeeded") is None
