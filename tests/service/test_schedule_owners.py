"""Schedules of several users in one service (a JupyterHub service's views, JobService.as_user)
on the real local service (SQLite store), its engine not started: a user sees and changes only
their own schedules (another's is a 404 that does not confirm it exists, whatever the route), a
user's run carries their owner label and the schedule's, a Hub user's schedule takes its
notebook from git (served over HTTP on loopback: file:// is the service's own files), and a
store that cannot hold schedules answers 501 naming its backend."""

from __future__ import annotations

import pytest
from git_support import GitHTTP, Repo
from helpers import write_notebook

from jupyter_nbvalidation.composition import local_service
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.schedules import Schedules
from jupyter_nbvalidation.store.base import OWNER_LABEL, SCHEDULE_LABEL

NO_BUILD = {"buildConfig": {"enabled": False}}
pytestmark = pytest.mark.asyncio  # the engine's tasks run in the test's loop (the `local` fixture's)


@pytest.fixture
def service(tmp_path):
    write_notebook(tmp_path / "root" / "nb.ipynb", ["print(1)"])
    return local_service(str(tmp_path / "root"), str(tmp_path / "data"))


def _manifest(name: str, job: dict) -> dict:
    return {"metadata": {"name": name}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": job}}}


async def _refused(call) -> ApiError:
    with pytest.raises(ApiError) as e:
        await call
    return e.value


async def test_a_user_sees_and_changes_only_their_own_schedules(service, tmp_path):
    repo = Repo(tmp_path / "git")
    repo.notebook("nb.ipynb", ["print(1)"])
    repo.commit("first")
    await service.open()
    try:
        with GitHTTP(repo.bare.parent) as server:
            job = {"notebook": {"git": {"url": server.url(), "ref": "main"}, "path": "nb.ipynb"}, "podConfig": NO_BUILD}
            alice, bob = Schedules(service.as_user("alice")), Schedules(service.as_user("bob"))
            made = await alice.create(_manifest("nightly", job))
            assert made["metadata"]["name"] == "nightly"
            for call in (bob.get("nightly"), bob.delete("nightly"), bob.trigger("nightly"), bob.jobs("nightly", 10),
                         bob.set_suspend("nightly", {"spec": {"suspend": True}})):
                err = await _refused(call)
                assert err.status == 404 and err.message == "no schedule named 'nightly'"
            assert (await bob.list())["items"] == []
            assert [s["metadata"]["name"] for s in (await alice.list())["items"]] == ["nightly"]
            # bob's names are his own: the same name is another schedule
            await bob.create(_manifest("nightly", job))
            assert len((await service.store.list_schedules(None, every_owner=True))) == 2

            run = await alice.trigger("nightly")  # through the submit path, as alice
            assert run["metadata"]["labels"] == {OWNER_LABEL: "alice", SCHEDULE_LABEL: "nightly"}
            assert [j["metadata"]["name"] for j in (await alice.jobs("nightly", 10))["items"]] == \
                [run["metadata"]["name"]]
            assert (await bob.jobs("nightly", 10))["items"] == []
            # a run still going: no second one (the engine is not started, so it waits)
            err = await _refused(alice.trigger("nightly"))
            assert err.status == 409 and run["metadata"]["name"] in err.message
            assert (await alice.get("nightly"))["status"]["active"] == run["metadata"]["name"]
            assert (await bob.get("nightly"))["status"]["active"] is None

            # a Hub user's schedule takes its notebook from git: the service keeps no folder of theirs
            err = await _refused(alice.create(_manifest("local", {"notebook": {"path": "nb.ipynb"}})))
            assert err.status == 400 and err.field == "spec.jobTemplate.spec.notebook.git"
            err = await _refused(alice.create(_manifest("files", {**job, "notebook": {
                "git": {"url": repo.url, "ref": "main"}, "path": "nb.ipynb"}})))
            assert err.status == 400 and err.field == "spec.jobTemplate.spec.notebook.git.url"
            assert [s["metadata"]["name"] for s in (await alice.list())["items"]] == ["nightly"]

            await alice.delete("nightly")
            assert (await bob.get("nightly"))["metadata"]["name"] == "nightly"
            assert (await service.store.get(run["metadata"]["name"]))["metadata"]["name"]  # its jobs stay
    finally:
        await service.close()


async def test_a_store_without_schedules_answers_501_naming_the_backend(service, monkeypatch):
    monkeypatch.setattr(type(service.store), "schedules_supported", False)
    err = await _refused(_schedules_of(service))
    assert err.status == 501 and "local backend" in err.message


async def _schedules_of(service) -> Schedules:
    return Schedules(service)


async def test_runs_past_the_history_limits_are_removed_oldest_first(local, notebook):
    """successfulJobsHistoryLimit / failedJobsHistoryLimit: real runs (the local fixture's engine and
    kernels), the oldest finished ones past each limit removed, the newest kept."""
    from jupyter_nbvalidation.core.model import Phase
    from jupyter_nbvalidation.service.schedules import prune

    notebook("ok.ipynb", ["print(1)"])
    schedules = Schedules(local.service)
    manifest = _manifest("kept", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD})
    manifest["spec"].update(successfulJobsHistoryLimit=2, failedJobsHistoryLimit=0)
    await schedules.create(manifest)
    names = []
    for _ in range(3):
        job = await schedules.trigger("kept")
        done = await local.engine.wait_for_terminal(job["metadata"]["name"], 120)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        names.append(job["metadata"]["name"])
    doc = await local.store.get_schedule("kept", None)
    assert await prune(local.service, None, doc) == 1
    left = [j["metadata"]["name"] for j in (await schedules.jobs("kept", 10))["items"]]
    assert left == names[:0:-1]  # the two newest, newest first
    assert [r["job"] for r in (await schedules.get("kept"))["status"]["recent"]] == left
