"""The cache of notebooks from git is collected (issue 45): a commit's files go once no job of
that commit is left (and no fetch used them for an hour), a repository once it was not fetched
for NBValidation.git_cache_ttl; a later fetch of either works as the first did."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from git_support import Repo

from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.asyncio

NO_BUILD = {"buildConfig": {"enabled": False}}


def _spec(url: str, ref: str) -> dict:
    return {"notebook": {"git": {"url": url, "ref": ref}, "path": "check.ipynb"}, "podConfig": NO_BUILD}


async def _run(local, spec: dict) -> dict:
    job = await local.service.submit(spec)
    done = await local.engine.wait_for_terminal(job["metadata"]["name"], 300)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    return done


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_a_commits_files_go_with_its_last_job_and_an_unused_repository_after_its_ttl(local, tmp_path: Path):
    repo = Repo(tmp_path / "git")
    repo.notebook("check.ipynb", ["print('ok')"])
    first = repo.commit("first")
    second = repo.commit("second")
    a = await _run(local, _spec(repo.url, first))
    b = await _run(local, _spec(repo.url, second))
    git = Path(local.service.git.root)
    trees = git / "trees"
    assert sorted(p.name for p in trees.iterdir()) == sorted([first, second])
    for commit in (first, second):
        _age(trees / commit, 7200)

    report = await local.service.gc()
    assert report["gitTrees"] == [] and report["gitRepos"] == []  # both commits still have their job

    await local.service.delete(a["metadata"]["name"])
    report = await local.service.gc()
    assert report["gitTrees"] == [first], report
    assert sorted(p.name for p in trees.iterdir()) == [second]  # b's root stays

    # a commit fetched again is used: a collection leaves its files alone for a while
    await local.service.delete(b["metadata"]["name"])
    again = await _run(local, _spec(repo.url, second))
    await local.service.delete(again["metadata"]["name"])
    assert (await local.service.gc())["gitTrees"] == []

    # a repository not fetched for the ttl goes; the next fetch brings it back whole
    (repo_dir,) = (git / "repos").iterdir()
    local.service.git_cache_ttl = 3600
    assert (await local.service.gc())["gitRepos"] == []
    _age(repo_dir / "nbv-last-use", 7200)
    report = await local.service.gc()
    assert report["gitRepos"] == [repo_dir.name] and not repo_dir.exists(), report
    back = await _run(local, _spec(repo.url, "main"))
    assert back["status"]["source"]["commit"] == second and repo_dir.is_dir()
