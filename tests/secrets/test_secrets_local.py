"""Secrets by name on the local backend, end to end (docs/secrets.md): a real Jupyter server whose
config names a secret read from its environment, a real kernel (sandboxed where the machine
allows), the attacker's notebook (tests/secrets_attack.py) submitted over REST and through the CLI;
then a scan of every artifact: every file of the data dir (the SQLite store's bytes too), the REST
answers of the job, the CLI's outputs (describe, events, run --junitxml --html) and the server's
log. And at submit: an unknown name and a name the caller may not use are the same 400, with
nothing created."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ServerProcess, make_local
from helpers import cli, wait, write_notebook
from secrets_attack import USER, VALUE, attack_cells, scan_files, scan_text

from jupyter_nbvalidation.core.vocabulary import Phase
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.service.errors import ApiError

NOBUILD = {"buildConfig": {"enabled": False}}
CONFIG = """c.NBValidation.secrets = {
    "warehouse": {"fromEnv": {"DB_PASSWORD": "NBV_TEST_WAREHOUSE_PASSWORD", "DB_USER": "NBV_TEST_WAREHOUSE_USER"}},
}
"""


def _server(tmp_path: Path) -> ServerProcess:
    config = tmp_path / "nbv_secrets_config.py"
    config.write_text(CONFIG)
    return ServerProcess(tmp_path, extra_args=[f"--config={config}"])


def _call(server: ServerProcess, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(server.url + "nbvalidation/api/v1/" + path, method=method,
                                 headers={"Authorization": f"token {server.token}", "Content-Type": "application/json"},
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("NBV_TEST_WAREHOUSE_PASSWORD", VALUE)
    monkeypatch.setenv("NBV_TEST_WAREHOUSE_USER", USER)


def test_the_attackers_notebook_leaves_no_trace(tmp_path, secret_env):
    server = _server(tmp_path).start()
    try:
        write_notebook(server.root / "nbs" / "attack.ipynb", attack_cells())
        status, body = _call(server, "POST", "jobs", {"notebook": {"path": "nbs/attack.ipynb"},
                                                      "podConfig": {**NOBUILD, "credentials": ["warehouse"]}})
        assert status == 201, body
        name = json.loads(body)["metadata"]["name"]

        def ended() -> dict | None:
            job = json.loads(_call(server, "GET", f"jobs/{name}")[1])
            return job if job["status"].get("phase") in Phase.TERMINAL else None

        job = wait(ended, 240, f"{name} to end", interval=0.5)
        answers = {path: _call(server, "GET", path) for path in (
            "jobs", f"jobs/{name}", f"jobs/{name}/events", f"jobs/{name}/timeline", f"jobs/{name}/notebook",
            f"jobs/{name}/buildlog", f"jobs/{name}/environment", f"jobs/{name}/changes", "health")}
        # the CLI through the server: describe, events, and a run with its reports
        env = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
        outs = {"describe": cli("describe", name, cwd=server.root, env=env),
                "events": cli("events", name, cwd=server.root, env=env),
                "run": cli("run", "nbs/attack.ipynb", "--no-build", "--credential", "warehouse", "--junitxml",
                           str(tmp_path / "junit.xml"), "--html", str(tmp_path / "report.html"), cwd=server.root,
                           env=env, timeout=300)}
    finally:
        server.stop()
    assert not (server.root / "nbs" / "leak.txt").exists()  # the kernel wrote in its working copy only
    leaks = [f"REST {path}: {scan_text(text, [VALUE, USER])[:2]}" for path, (_s, text) in answers.items()
             if scan_text(text, [VALUE, USER])]
    leaks += [f"CLI {what}: {scan_text(p.stdout + p.stderr, [VALUE, USER])[:2]}" for what, p in outs.items()
              if scan_text(p.stdout + p.stderr, [VALUE, USER])]
    assert server.data_dir.is_relative_to(tmp_path)
    # the data dir (the store's bytes, run folders, logs), the reports, the server's log, the root
    leaks += scan_files(tmp_path, [VALUE, USER])
    assert not leaks, "\n".join(leaks)
    sandbox = json.loads(answers["health"][1])["sandbox"]
    assert sandbox["enabled"], sandbox  # the kernel ran in the sandbox (its /tmp: the run's, removed with it)
    st = job["status"]
    # the verdict is the notebook's own (its last cell raises), the message masked
    assert st["phase"] == Phase.FAILED and st["reason"] == "ValidationFailed", st
    assert "cannot connect to the warehouse with ***" in st["message"], st["message"]
    executed = json.loads(answers[f"jobs/{name}/notebook"][1])
    assert len([c for c in executed["cells"] if c.get("outputs")]) == len(attack_cells()) - 1  # each showed it
    assert "***" in answers[f"jobs/{name}/notebook"][1]
    assert outs["run"].returncode == 1, outs["run"].stdout + outs["run"].stderr
    assert "***" in (tmp_path / "junit.xml").read_text() and "***" in (tmp_path / "report.html").read_text()


@pytest.mark.asyncio
async def test_an_unknown_name_and_a_name_not_allowed_are_the_same_400_with_nothing_created(tmp_path, notebook):
    env = make_local(tmp_path)
    env.backend.secrets = SecretRegistry({
        "servers-own": {"fromEnv": {"K": "NBV_TEST_NOT_SET"}},
        "alices": {"fromEnv": {"K": "NBV_TEST_NOT_SET"}, "users": ["alice"]},
        "analysts": {"fromEnv": {"K": "NBV_TEST_NOT_SET"}, "groups": ["analysts"]},
        "k8s-only": {"fromSecret": "warehouse", "users": ["alice"]},
    })
    nb = notebook("nb.ipynb", ["print(1)"])
    await env.service.open()
    try:
        def spec(*names: str) -> dict:
            return {"notebook": {"path": nb}, "podConfig": {**NOBUILD, "credentials": list(names)}}

        bob = env.service.as_user("bob", groups=["interns"])
        answers = []
        for view, name in ((bob, "nosuch"), (bob, "alices"), (bob, "analysts"), (bob, "servers-own"), (bob, "k8s-only"),
                           (env.service.as_user("alice", admin=True), "servers-own"), (env.service, "nosuch")):
            with pytest.raises(ApiError) as e:
                await view.submit(spec(name))
            err = e.value
            assert err.status == 400, err
            answers.append((err.field, err.message.replace(repr(name), "NAME")))
        assert {f for f, _ in answers} == {"spec.podConfig.credentials[0]"}, answers
        assert len({m for _f, m in answers}) == 1, answers  # one answer, whatever the cause
        with pytest.raises(ApiError) as e:  # the item is named where it stands
            await env.service.submit(spec("alices", "nosuch"))
        assert e.value.field == "spec.podConfig.credentials[1]", e.value
        jobs, _ = await env.store.list_jobs()
        assert jobs == [] and not list((tmp_path / "data").glob("jobs/*")), "nothing created"
        # allowed: by name, by group, and the server's own user for every secret
        for view, names in ((env.service.as_user("alice"), ["alices"]),
                            (env.service.as_user("carol", groups=["analysts"]), ["analysts"]),
                            (env.service, ["servers-own", "alices", "analysts"])):
            job = await view.submit(spec(*names))
            assert job["spec"]["podConfig"]["credentials"] == names
        with pytest.raises(ApiError, match=r"credentials\[0\]: secret 'k8s-only': it is a Kubernetes Secret"):
            await env.service.as_user("alice").submit(spec("k8s-only"))  # told only once they may use it
        with pytest.raises(ApiError, match=r"credentials\[1\]: secret 'alices' is named twice"):
            await env.service.submit(spec("alices", "alices"))
    finally:
        await env.service.close()


@pytest.mark.asyncio
async def test_a_job_with_credentials_is_never_a_verdict_cache_hit(tmp_path, notebook, monkeypatch):
    """The same notebook, unchanged, Succeeded: without credentials the next one is a cache hit;
    with them, neither is it one nor does its success answer for a later job."""
    env = make_local(tmp_path)
    env.backend.secrets = SecretRegistry({"warehouse": {"fromEnv": {"DB_PASSWORD": "NBV_TEST_CACHE_PW"}}})
    monkeypatch.setenv("NBV_TEST_CACHE_PW", VALUE)
    nb = notebook("nb.ipynb", ["import os\nprint(len(os.environ.get('DB_PASSWORD', '')))"])
    plain = {"notebook": {"path": nb}, "podConfig": NOBUILD}
    with_secret = {"notebook": {"path": nb}, "podConfig": {**NOBUILD, "credentials": ["warehouse"]}}
    await env.engine.start()
    try:
        done = await env.run(**with_secret)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert await env.service.unchanged(with_secret) is None  # never reused
        assert await env.service.unchanged(plain) is None  # nor answers for another spec
        done = await env.run(**plain)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert (await env.service.unchanged(plain))["metadata"]["name"] == done["metadata"]["name"]  # the converse
        assert await env.service.unchanged(with_secret) is None
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_secret_that_cannot_be_read_at_the_run_is_infrastructure_named(tmp_path, notebook, monkeypatch):
    """The server's variable is gone by the run: InfrastructureFailed naming the secret and the
    variable, in seconds, never a cell failure (the notebook never ran)."""
    env = make_local(tmp_path)
    env.backend.secrets = SecretRegistry({"warehouse": {"fromEnv": {"DB_PASSWORD": "NBV_TEST_GONE"}}})
    nb = notebook("nb.ipynb", ["print(1)"])
    monkeypatch.delenv("NBV_TEST_GONE", raising=False)
    await env.engine.start()
    try:
        done = await env.run(notebook={"path": nb}, podConfig={**NOBUILD, "credentials": ["warehouse"]})
    finally:
        await env.engine.stop()
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == "InfrastructureFailed", st
    assert "secret 'warehouse'" in st["message"] and "NBV_TEST_GONE" in st["message"], st["message"]
