""""Since the last success" for a notebook from git (issue 45): the last success is found
across commits (each commit is a root of its own), and the summary names the commits between
the two runs and the files they changed under the notebook's folder, read from the fetch
cache with no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_support import Repo

from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.asyncio

NO_BUILD = {"buildConfig": {"enabled": False}}


def _spec(url: str, ref: str = "main") -> dict:
    return {"notebook": {"git": {"url": url, "ref": ref}, "path": "nbs/check.ipynb"}, "podConfig": NO_BUILD}


async def _run(local, spec: dict) -> dict:
    job = await local.service.submit(spec)
    return await local.engine.wait_for_terminal(job["metadata"]["name"], 300)


async def test_a_push_that_breaks_it_is_named_with_its_commit_and_files(local, tmp_path: Path):
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["assert open('data.txt').read() == 'ok', 'data.txt changed'"])
    repo.write("nbs/data.txt", "ok")
    first = repo.commit("first")
    green = await _run(local, _spec(repo.url))
    assert green["status"]["phase"] == Phase.SUCCEEDED, green["status"].get("message")

    repo.write("README.md", "outside the notebook's folder")
    docs = repo.commit("Document the repository")
    repo.write("nbs/data.txt", "broken")
    breaking = repo.commit("Break the data file")
    red = await _run(local, _spec(repo.url))
    assert red["status"]["phase"] == Phase.FAILED, red["status"]

    summary = await local.service.since_last_success(red["metadata"]["name"])
    assert summary["since"]["name"] == green["metadata"]["name"]  # an earlier commit's success
    commits = summary["commits"]
    assert (commits["from"], commits["to"], commits["count"], commits["ancestor"]) == (first, breaking, 2, True)
    assert [(c["commit"], c["subject"], c["files"]) for c in commits["items"]] == [
        (breaking, "Break the data file", ["nbs/data.txt"]), (docs, "Document the repository", [])]
    assert commits["files"] == ["nbs/data.txt"]
    assert summary["cells"]["changed"] is False
    assert summary["sentence"].startswith(f'2 commits ({breaking[:7]} "Break the data file", {docs[:7]} '
                                          '"Document the repository"), changing nbs/data.txt'), summary["sentence"]


async def test_a_rerun_of_the_same_commit_says_same_commit(local, tmp_path: Path):
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["import os", "assert not os.path.exists('/tmp/nbv-never-there'), 'x'"])
    repo.commit("first")
    spec = _spec(repo.url)
    spec["podConfig"] = {**NO_BUILD, "env": [{"name": "RUN", "value": "1"}]}
    green = await _run(local, spec)
    assert green["status"]["phase"] == Phase.SUCCEEDED, green["status"].get("message")
    spec["podConfig"]["env"] = [{"name": "RUN", "value": "2"}]
    again = await _run(local, spec)
    summary = await local.service.since_last_success(again["metadata"]["name"])
    assert summary["since"]["name"] == green["metadata"]["name"]
    assert summary["commits"]["count"] == 0 and summary["sentence"].startswith("same commit"), summary["sentence"]
