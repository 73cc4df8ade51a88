"""Notebooks from git through the entry points: the REST API of a real Jupyter server (the
upstream operator's sample shape: notebook.git + goldenNotebook.git + timeout) and
``jupyter nbvalidation run --git URL --ref REF [PATH...]``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from git_support import GitHTTP, Repo
from helpers import cli, rest_wait_terminal, write_golden
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

PASSWORD = "pw-rest-Yv93-never-shown"


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    """The server of conftest.py, with one secret for the repository's credentials (its values
    from the server's environment, read at each fetch)."""
    monkeypatch.setenv("NBV_TEST_REST_GIT_USER", "alice")
    monkeypatch.setenv("NBV_TEST_REST_GIT_PASSWORD", PASSWORD)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
        "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
        "NBValidation": {"secrets": {"repo-creds": {"fromEnv": {"username": "NBV_TEST_REST_GIT_USER",
                                                                "password": "NBV_TEST_REST_GIT_PASSWORD"}}}},
    }


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path / "git")
    r.notebook("nbs/check.ipynb", ["print('hello from git')"])
    r.notebook("nbs/sub/other.ipynb", ["x = 1 + 1", "assert x == 2"])
    r.write("README.md", "a repository")
    return r


async def test_the_upstream_sample_shape_validates_through_rest(jp_fetch, jp_serverapp, repo, tmp_path):
    """The upstream operator's sample (notebook and golden notebook from git, credentialsSecret, a
    timeout), without serviceAccountName: 201, the job's status carries the commits, the golden
    comparison ran; the password is in no answer and nowhere in the data dir."""
    (repo.work / "golden").mkdir()
    write_golden(repo.work / "nbs/check.ipynb", "hello from git\n", repo.work / "golden/check.ipynb")
    golden_commit = repo.commit("the golden copy")
    repo.tag("golden-v1")
    write_golden(repo.work / "nbs/check.ipynb", "something else\n", repo.work / "golden/check.ipynb")
    commit = repo.commit("a golden copy the notebook does not match", branch="later")
    answers = []
    with GitHTTP(repo.bare.parent, auth=("alice", PASSWORD)) as server:
        git = {"url": server.url(), "ref": "main", "credentialsSecret": "repo-creds"}
        spec = {"notebook": {"git": git, "path": "nbs/check.ipynb"},
                "goldenNotebook": {"git": {**git, "ref": "golden-v1"}, "path": "golden/check.ipynb"},
                "podConfig": {"buildConfig": {"enabled": False}},
                "timeout": "5m"}
        r = await call(jp_fetch, "jobs", method="POST", body=spec, raw=True)
        assert r.code == 201
        answers.append(r.body.decode())
        name = json.loads(r.body)["metadata"]["name"]
        done = await rest_wait_terminal(jp_fetch, name, 300)
        st = done["status"]
        assert st["phase"] == "Succeeded", st
        assert st["source"] == {"url": server.url(), "ref": "main", "commit": golden_commit,
                                "golden": {"url": server.url(), "ref": "golden-v1", "commit": golden_commit}}
        answers += [json.dumps(done), (await call(jp_fetch, "jobs", name, "events", raw=True)).body.decode()]
        # the golden copy of another ref: compared, and red
        spec["goldenNotebook"]["git"]["ref"] = "later"
        r = await call(jp_fetch, "jobs", method="POST", body=spec, raw=True)
        done = await rest_wait_terminal(jp_fetch, json.loads(r.body)["metadata"]["name"], 300)
        assert done["status"]["phase"] == "Failed" and done["status"]["source"]["golden"]["commit"] == commit
        assert done["status"]["comparisonResult"]["result"] == "failed", done["status"]
        answers.append(json.dumps(done))
    assert not any(PASSWORD in a for a in answers)
    leaks = [str(p) for p in (tmp_path / "nbv-data").rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()]
    assert leaks == []

    with pytest.raises(HTTPClientError) as err:  # the upstream field this tool does not take, named
        await call(jp_fetch, "jobs", method="POST", body={
            **spec, "podConfig": {"serviceAccountName": "default"}})
    assert err.value.code == 400
    assert "spec.podConfig.serviceAccountName" in err.value.response.body.decode()

    with pytest.raises(HTTPClientError) as err:
        await call(jp_fetch, "jobs", method="POST", body={
            **spec, "notebook": {"git": {"url": "https://u:secret-pw@example.org/r.git", "ref": "main"},
                                 "path": "nbs/check.ipynb"}})
    body = err.value.response.body.decode()
    assert err.value.code == 400 and "spec.notebook.git.url" in body and "secret-pw" not in body


def test_run_git_validates_the_repository_at_one_commit(tmp_path, repo):
    repo.commit("first")
    work = tmp_path / "elsewhere"
    work.mkdir()
    common = ("--local", "--data-dir", str(tmp_path / "data"), "-j", "1", "-o", "json", "--no-build")
    proc = cli("run", "--git", repo.url, "--ref", "main", "nbs", *common, cwd=work, timeout=600, no_servers=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["notebook"] for r in rows) == ["nbs/check.ipynb", "nbs/sub/other.ipynb"], rows
    assert {r["verdict"] for r in rows} == {"Succeeded"}

    proc = cli("run", "--git", repo.url, "--ref", "no-such-branch", *common, cwd=work, timeout=600,
               no_servers=True)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # infrastructure: the repository cannot be had
    assert "no such ref" in proc.stderr

    proc = cli("run", "--git", "ftp://example.org/r.git", *common, cwd=work, timeout=600, no_servers=True)
    assert proc.returncode == 2 and "--git" in proc.stderr, proc.stdout + proc.stderr


def test_submit_git_at_a_commit_sha(tmp_path, repo):
    first = repo.commit("first")
    repo.write("later.txt", "x")
    repo.commit("second")
    work = tmp_path / "elsewhere"
    work.mkdir()
    proc = cli("submit", "nbs/check.ipynb", "--git", repo.url, "--ref", first, "--local", "--data-dir",
               str(tmp_path / "data"), "--no-build", "--wait", "-o", "json", cwd=work, timeout=600, no_servers=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = json.loads(proc.stdout)
    assert job["status"]["source"] == {"url": repo.url, "ref": first, "commit": first}
    assert job["spec"]["notebook"] == {"git": {"url": repo.url, "ref": first}, "path": "nbs/check.ipynb"}
