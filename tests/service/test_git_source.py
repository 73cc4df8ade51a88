"""Notebooks from git (issue 45, docs/watching.md): a real repository made here, fetched by
file:// and over git's smart HTTP (``git http-backend`` on loopback), validated with real
kernels on the local backend. Branch, tag and SHA refs; the commit in ``status.source``; the
verdict cache across commits; fetches that cannot succeed as infrastructure verdicts."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from pathlib import Path

import pytest
from git_support import GitHTTP, Repo

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.service.errors import ApiError

pytestmark = pytest.mark.asyncio  # the engine's tasks run in the test's loop (the `local` fixture's)

NO_BUILD = {"buildConfig": {"enabled": False}}
READS_BESIDE = ["print(open('data.txt').read())", "assert open('data.txt').read() == 'ok', 'data.txt changed'"]


def _spec(url: str, ref: str, path: str = "nbs/check.ipynb") -> dict:
    return {"notebook": {"git": {"url": url, "ref": ref}, "path": path}, "podConfig": NO_BUILD}


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path / "git")
    r.notebook("nbs/check.ipynb", READS_BESIDE)
    r.write("nbs/data.txt", "ok")
    r.write("README.md", "a repository")
    return r


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))
            ).total_seconds()


async def _run(local, spec: dict, timeout: float = 300) -> dict:
    job = await local.service.submit(spec)
    return await local.engine.wait_for_terminal(job["metadata"]["name"], timeout)


async def test_branch_tag_and_sha_refs_validate_and_record_the_commit(local, repo):
    first = repo.commit("first")
    repo.tag("v1")
    for ref in ("main", "v1", first):
        done = await _run(local, _spec(repo.url, ref))
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
        assert done["status"]["source"] == {"url": repo.url, "ref": ref, "commit": first}
    # the job's root is the commit's files, with no .git anywhere in them
    root = Path(done["metadata"]["annotations"]["nbvalidation.dev/root"])
    assert (root / "nbs" / "data.txt").read_text() == "ok"
    assert not list(root.rglob(".git"))


async def test_a_rerun_of_the_same_commit_is_a_hit_and_a_breaking_commit_is_red(local, repo):
    repo.commit("first")
    green = await _run(local, _spec(repo.url, "main"))
    assert green["status"]["phase"] == Phase.SUCCEEDED, green["status"].get("message")
    hit = await local.service.unchanged(_spec(repo.url, "main"))
    assert hit is not None and hit["metadata"]["name"] == green["metadata"]["name"]

    repo.write("nbs/data.txt", "broken")  # the notebook is the same; the file beside it is not
    second = repo.commit("break the data")
    assert await local.service.unchanged(_spec(repo.url, "main")) is None  # never a pass through the cache
    red = await _run(local, _spec(repo.url, "main"))
    assert red["status"]["phase"] == Phase.FAILED, red["status"]
    assert red["status"]["reason"] == "ValidationFailed"
    assert red["status"]["source"]["commit"] == second
    assert "data.txt changed" in red["status"]["message"]


@pytest.mark.parametrize(("url", "ref", "cause"), [
    ("https://no-such-host.invalid/repo.git", "main", "no such host"),
    (None, "no-such-branch", "no such ref"),
    (None, "0" * 40, "no such ref"),
    ("http://127.0.0.1:9/repo.git", "main", "cannot connect"),
    ("file:///nonexistent/repo.git", "main", "no such repository"),
])
async def test_a_fetch_that_fails_is_an_infrastructure_verdict_in_seconds(local, repo, url, ref, cause):
    repo.commit("first")
    started = time.monotonic()
    job = await local.service.submit(_spec(url or repo.url, ref))  # the fetch, and its failure, happen here
    took = time.monotonic() - started
    done = await local.engine.wait_for_terminal(job["metadata"]["name"], 300)
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == "InfrastructureFailed", st
    assert cause in st["message"] and "notebook.git" in st["message"], st["message"]
    assert st["source"] == {"url": url or repo.url, "ref": ref}  # no commit: none was had
    assert "failedCellIndex" not in st and not st.get("results")
    assert took < 10, took
    reasons = [t["reason"] for t in st["transitions"]]
    assert reasons == ["Accepted", "InfrastructureFailed"], reasons
    # once the engine looks at it (on this shared machine, leading may take a while), it ends at once
    assert _seconds(st["transitions"][0]["time"], st["transitions"][1]["time"]) < 5


@pytest.mark.parametrize("url", ["ftp://example.org/repo.git", "https://user:pw@example.org/repo.git",
                                 "https://token@example.org/repo.git", "example.org/repo.git", "file://host/repo",
                                 "ext::sh -c touch% /tmp/x", "-uhttps://example.org/r.git"])
async def test_a_bad_url_is_a_400_naming_the_field_with_nothing_created(local, url):
    with pytest.raises(ApiError) as err:
        await local.service.submit(_spec(url, "main"))
    assert err.value.status == 400 and err.value.field == "spec.notebook.git.url", err.value
    assert "pw" not in err.value.message and "token@" not in err.value.message
    items, _ = await local.store.list_jobs(limit=10)
    assert items == []
    assert not (Path(local.backend.data_dir) / "git" / "repos").exists()  # nothing fetched either


async def test_an_unknown_credentials_secret_is_a_400_naming_it(local, repo):
    repo.commit("first")
    spec = _spec(repo.url, "main")
    spec["notebook"]["git"]["credentialsSecret"] = "nope"
    with pytest.raises(ApiError) as err:
        await local.service.submit(spec)
    assert err.value.status == 400 and err.value.field == "spec.notebook.git.credentialsSecret"
    assert (await local.store.list_jobs(limit=10))[0] == []


async def test_over_git_http_a_sha_is_fetched_directly_and_the_cache_needs_no_network_again(local, repo, tmp_path):
    first = repo.commit("first")
    repo.write("later.txt", "x")
    repo.commit("second")
    with GitHTTP(repo.bare.parent) as server:
        done = await _run(local, _spec(server.url(), first))  # a fresh cache: the SHA itself, not a branch
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
        assert done["status"]["source"]["commit"] == first
        asked = len(server.requests)
        again = await _run(local, _spec(server.url(), first))
        assert again["status"]["phase"] == Phase.SUCCEEDED
        assert len(server.requests) == asked  # in the cache: no request at all
        tip = await _run(local, _spec(server.url(), "main"))
        assert tip["status"]["source"]["commit"] != first and tip["status"]["phase"] == Phase.SUCCEEDED


PASSWORD = "pw-Zq81-never-shown"


async def test_a_private_repository_over_http_with_credentials_from_a_named_secret(local, repo, monkeypatch,
                                                                                  caplog):
    """Basic auth: the right secret validates; a wrong one and none are infrastructure verdicts
    naming the credentials; the password is nowhere: not in the data dir (the store, the cache's
    config, the snapshot, the logs), not in the jobs as REST would answer them, not in a message."""
    from jupyter_nbvalidation.secrets.registry import SecretRegistry

    caplog.set_level(logging.DEBUG)  # every log record of the service, the engine and the backend
    first = repo.commit("first")
    monkeypatch.setenv("NBV_TEST_GIT_USER", "alice")
    monkeypatch.setenv("NBV_TEST_GIT_PASSWORD", PASSWORD)
    monkeypatch.setenv("NBV_TEST_GIT_WRONG", "not-the-password")
    local.backend.secrets = SecretRegistry({
        "repo-creds": {"fromEnv": {"username": "NBV_TEST_GIT_USER", "password": "NBV_TEST_GIT_PASSWORD"}},
        "wrong-creds": {"fromEnv": {"username": "NBV_TEST_GIT_USER", "token": "NBV_TEST_GIT_WRONG"}},
        "only-hub-bob": {"fromEnv": {"username": "NBV_TEST_GIT_USER", "password": "NBV_TEST_GIT_PASSWORD"},
                         "users": ["bob"]}})
    jobs = []
    with GitHTTP(repo.bare.parent, auth=("alice", PASSWORD)) as server:
        spec = _spec(server.url(), "main")
        spec["notebook"]["git"]["credentialsSecret"] = "repo-creds"
        good = await _run(local, spec)
        assert good["status"]["phase"] == Phase.SUCCEEDED, good["status"].get("message")
        assert good["status"]["source"] == {"url": server.url(), "ref": "main", "commit": first}
        jobs.append(good)
        # the commit is in the cache now, fetched with the secret: a fetch without it is not answered from there
        for name, cause in (("wrong-creds", "wrong or missing credentials"), (None, "wrong or missing credentials")):
            spec = _spec(server.url(), first)
            if name:
                spec["notebook"]["git"]["credentialsSecret"] = name
            bad = await _run(local, spec)
            assert bad["status"]["reason"] == "InfrastructureFailed" and cause in bad["status"]["message"], \
                bad["status"]
            jobs.append(bad)
        assert any(given for _, _, given in server.requests)  # the credentials did reach the server
    hub_view = local.service.as_user("mallory")  # a Hub user the secret does not name: the same 400 as unknown
    spec = _spec("https://git.example.org/r.git", "main")
    spec["notebook"]["git"]["credentialsSecret"] = "only-hub-bob"
    with pytest.raises(ApiError) as err:
        await hub_view.submit(spec)
    assert err.value.status == 400 and err.value.field == "spec.notebook.git.credentialsSecret"
    refused = str(err.value)
    spec["notebook"]["git"]["credentialsSecret"] = "no-such-secret"
    with pytest.raises(ApiError) as err:  # the same answer as a name that does not exist: nothing confirmed
        await hub_view.submit(spec)
    assert str(err.value).replace("no-such-secret", "only-hub-bob") == refused
    with pytest.raises(ApiError) as err:  # nor may a Hub user's job read the service's own files
        await hub_view.submit(_spec(repo.url, "main"))
    assert err.value.status == 400 and err.value.field == "spec.notebook.git.url"

    await local.engine.recorder.flush()
    seen = json.dumps([await local.service.get(j["metadata"]["name"]) for j in jobs])
    seen += json.dumps([await local.service.events(j["metadata"]["name"]) for j in jobs])
    assert PASSWORD not in seen and "not-the-password" not in seen
    assert caplog.records and PASSWORD not in caplog.text and "not-the-password" not in caplog.text
    leaks = [str(p) for p in Path(local.backend.data_dir).rglob("*") if p.is_file()
             and (PASSWORD.encode() in p.read_bytes() or b"not-the-password" in p.read_bytes())]
    assert leaks == []
    configs = list((Path(local.backend.data_dir) / "git" / "repos").glob("*/config"))
    assert configs and all("alice" not in c.read_text() and "http" not in c.read_text() for c in configs)


async def test_a_server_that_never_answers_is_timed_out_and_its_git_killed(local):
    """A port that accepts and says nothing: the fetch ends at git_timeout, its git process group is
    killed, and the job is an infrastructure verdict saying it timed out."""
    import socket
    import subprocess

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    local.service.git.timeout = 2.0
    try:
        started = time.monotonic()
        job = await local.service.submit(_spec(f"http://127.0.0.1:{port}/repo.git", "main"))
        took = time.monotonic() - started
    finally:
        listener.close()
    assert 1.5 < took < 8, took
    done = await local.engine.wait_for_terminal(job["metadata"]["name"], 300)
    assert done["status"]["reason"] == "InfrastructureFailed" and "timed out" in done["status"]["message"]
    left = subprocess.run(["pgrep", "-f", f"127.0.0.1:{port}/repo.git"], capture_output=True, text=True).stdout
    assert left.strip() == "", left
