"""Schedules (issue 45, docs/watching.md, Schedules) through a real Jupyter server with the
local backend: a NotebookValidationSchedule over a real git repository (file://) that turns red
on a breaking commit and green after the fix, never two runs at once under a period shorter
than its notebook, bad input refused naming the field with nothing stored, pause, resume,
trigger and delete (its jobs stay). The server takes a sixth cron field counting seconds
(``c.NBValidation.schedule_seconds_field``, tests only), so a tick comes every second or two."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from git_support import Repo
from helpers import rest_call as call
from helpers import wait_async, write_notebook
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.store.base import SCHEDULE_LABEL

NO_BUILD = {"buildConfig": {"enabled": False}}
READS_BESIDE = ["print(open('data.txt').read())", "assert open('data.txt').read() == 'ok', 'data.txt changed'"]


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
        "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
        "NBValidation": {"schedule_seconds_field": True},
    }


@pytest.fixture
def repo(tmp_path) -> Repo:
    r = Repo(tmp_path / "git")
    r.notebook("nbs/check.ipynb", READS_BESIDE)
    r.write("nbs/data.txt", "ok")
    return r


def _schedule(name: str, cron: str, job_spec: dict, **spec) -> dict:
    return {"apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationSchedule",
            "metadata": {"name": name}, "spec": {"schedule": cron, "jobTemplate": {"spec": job_spec}, **spec}}


async def _error(jp_fetch, *parts, **kw) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, **kw)
    return e.value.code, json.loads(e.value.response.body)["error"]


def _time(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


async def test_a_schedule_over_git_turns_red_on_a_breaking_commit_and_green_after_the_fix(jp_fetch, repo):
    first = repo.commit("first")
    spec = {"notebook": {"git": {"url": repo.url, "ref": "main"}, "path": "nbs/check.ipynb"}, "podConfig": NO_BUILD}
    r = await call(jp_fetch, "schedules", method="POST", body=_schedule("nightly", "*/2 * * * * *", spec), raw=True)
    assert r.code == 201 and r.headers["Location"].endswith("/schedules/nightly")
    created = json.loads(r.body)
    assert created["spec"]["concurrencyPolicy"] == "Forbid" and created["spec"]["suspend"] is False
    assert created["status"]["active"] is None and created["status"]["recent"] == []
    assert _time(created["status"]["nextScheduleTime"]) > _time(created["metadata"]["creationTimestamp"])
    assert "x-caller" not in created

    async def run_at(commit: str, phase: str) -> dict | None:
        doc = await call(jp_fetch, "schedules", "nightly")
        return doc if any(r["commit"] == commit and r["phase"] == phase for r in doc["status"]["recent"]) else None

    await wait_async(lambda: run_at(first, Phase.SUCCEEDED), 120, "a green run at the first commit")
    repo.write("nbs/data.txt", "broken")
    broken = repo.commit("break the data")
    await wait_async(lambda: run_at(broken, Phase.FAILED), 120, "a red run at the breaking commit")
    repo.write("nbs/data.txt", "ok")
    fixed = repo.commit("fix the data")
    doc = await wait_async(lambda: run_at(fixed, Phase.SUCCEEDED), 120, "a green run at the fix")

    # the strip: newest first, each run's verdict and commit; red between two greens
    strip = [(r["commit"], r["phase"]) for r in doc["status"]["recent"] if r["phase"] in Phase.TERMINAL]
    order = [c for c, _ in strip]
    assert order.index(fixed) < order.index(broken) < order.index(first)
    assert all(p == (Phase.FAILED if c == broken else Phase.SUCCEEDED) for c, p in strip)
    red = next(r for r in doc["status"]["recent"] if r["commit"] == broken)
    assert red["reason"] == "ValidationFailed" and red["finished"]
    assert doc["status"]["lastScheduleTime"]

    # its runs: labelled with the schedule, by both routes, and nothing else is
    other = await call(jp_fetch, "jobs", method="POST", body={"notebook": spec["notebook"], "podConfig": NO_BUILD})
    runs = (await call(jp_fetch, "jobs", params={"schedule": "nightly"}))["items"]
    assert runs == (await call(jp_fetch, "schedules", "nightly", "jobs"))["items"]
    assert len(runs) >= 3 and other["metadata"]["name"] not in {j["metadata"]["name"] for j in runs}
    assert SCHEDULE_LABEL not in other["metadata"].get("labels", {})
    for item in runs:
        job = await call(jp_fetch, "jobs", item["metadata"]["name"])
        assert job["metadata"]["labels"] == {SCHEDULE_LABEL: "nightly"}
        assert job["spec"]["notebook"]["git"] == {"url": repo.url, "ref": "main"}

    # delete: the schedule goes, its jobs stay
    gone = await call(jp_fetch, "schedules", "nightly", method="DELETE")
    assert gone["status"] == "Success" and "jobs are kept" in gone["message"]
    code, err = await _error(jp_fetch, "schedules", "nightly")
    assert code == 404
    for item in runs:  # (a job from git is not in GET /jobs, which lists the server root's notebooks)
        assert (await call(jp_fetch, "jobs", item["metadata"]["name"]))["metadata"]["labels"] == {
            SCHEDULE_LABEL: "nightly"}


async def test_no_two_runs_at_once_under_a_period_shorter_than_the_notebook(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "slow.ipynb", ["import time; time.sleep(4)"])
    body = _schedule("fast", "* * * * * *", {"notebook": {"path": "slow.ipynb"}, "podConfig": NO_BUILD})
    await call(jp_fetch, "schedules", method="POST", body=body)
    seen_active: set[str] = set()

    async def enough() -> dict | None:
        doc = await call(jp_fetch, "schedules", "fast")
        if doc["status"]["active"]:
            seen_active.add(doc["status"]["active"])
            running = [r for r in doc["status"]["recent"] if r["phase"] not in Phase.TERMINAL]
            assert len(running) <= 1, doc["status"]["recent"]
        done = [r for r in doc["status"]["recent"] if r["phase"] in Phase.TERMINAL]
        return doc if len(done) >= 2 and doc["status"]["skipped"] >= 3 else None

    doc = await wait_async(enough, 180, "two runs finished and ticks skipped", interval=0.2)
    # a trigger while a run goes is refused (409), never a second run
    if doc["status"]["active"]:
        code, err = await _error(jp_fetch, "schedules", "fast", "trigger", method="POST")
        assert code == 409 and doc["status"]["active"] in err["message"]
    await call(jp_fetch, "schedules", "fast", method="PATCH", body={"spec": {"suspend": True}})
    runs = [await call(jp_fetch, "jobs", i["metadata"]["name"])
            for i in (await call(jp_fetch, "schedules", "fast", "jobs"))["items"]]
    spans = []
    for job in runs:
        job = await wait_async(lambda j=job: _finished(jp_fetch, j["metadata"]["name"]), 60, "the last run to end")
        spans.append((_time(job["metadata"]["creationTimestamp"]), _time(job["status"]["completionTime"])))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"two runs overlapped: {spans}"
    assert len(spans) >= 2 and doc["status"]["skipped"] >= 3
    assert seen_active
    # paused: no tick runs (a tick a second, for three seconds) ...
    paused = await call(jp_fetch, "schedules", "fast")
    await asyncio.sleep(3)  # the pause is the scenario
    still = await call(jp_fetch, "schedules", "fast")
    assert len((await call(jp_fetch, "schedules", "fast", "jobs"))["items"]) == len(runs)
    assert still["status"]["skipped"] == paused["status"]["skipped"] and still["status"]["nextScheduleTime"] is None
    # ... resumed, the next tick runs again
    await call(jp_fetch, "schedules", "fast", method="PATCH", body={"spec": {"suspend": False}})
    await wait_async(lambda: _count_runs(jp_fetch, len(runs) + 1), 30, "a run after the resume")


async def _count_runs(jp_fetch, at_least: int) -> bool:
    return len((await call(jp_fetch, "schedules", "fast", "jobs"))["items"]) >= at_least


async def _finished(jp_fetch, name: str) -> dict | None:
    job = await call(jp_fetch, "jobs", name)
    return job if job["status"].get("phase") in Phase.TERMINAL else None


async def test_pause_resume_and_trigger(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(1)"])
    body = _schedule("daily", "@daily", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD}, suspend=True)
    doc = await call(jp_fetch, "schedules", method="POST", body=body)
    assert doc["spec"]["suspend"] is True and doc["status"]["nextScheduleTime"] is None
    resumed = await call(jp_fetch, "schedules", "daily", method="PATCH", body={"spec": {"suspend": False}})
    assert resumed["status"]["nextScheduleTime"].endswith("T00:00:00.000000Z")
    job = await call(jp_fetch, "schedules", "daily", "trigger", method="POST")
    assert job["metadata"]["labels"] == {SCHEDULE_LABEL: "daily"}
    done = await wait_async(lambda: _finished(jp_fetch, job["metadata"]["name"]), 120, "the triggered run")
    assert done["status"]["phase"] == Phase.SUCCEEDED
    doc = await call(jp_fetch, "schedules", "daily")
    assert [r["job"] for r in doc["status"]["recent"]] == [job["metadata"]["name"]]
    assert doc["status"]["active"] is None
    listed = await call(jp_fetch, "schedules")
    assert [s["metadata"]["name"] for s in listed["items"]] == ["daily"]
    code, err = await _error(jp_fetch, "schedules", "daily", method="PATCH", body={"spec": {"schedule": "@hourly"}})
    assert code == 400 and err["field"] == "spec.schedule"


async def test_a_tick_the_loop_saw_before_a_pause_does_not_run(jp_fetch, jp_root_dir, jp_serverapp):
    """The loop reads the schedules, then fires their due ticks: a pause written in between is
    read again under the schedule's lock, and the tick runs no job."""
    from jupyter_nbvalidation.service.schedules import fire

    write_notebook(jp_root_dir / "ok.ipynb", ["print(1)"])
    body = _schedule("yearly", "@yearly", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD})
    await call(jp_fetch, "schedules", method="POST", body=body)
    service = jp_serverapp.web_app.settings["nbvalidation_service"]
    seen = await service.store.get_schedule("yearly", None)  # as the loop read it: not paused
    await call(jp_fetch, "schedules", "yearly", method="PATCH", body={"spec": {"suspend": True}})
    assert await fire(service, None, seen, dt.datetime.now(dt.timezone.utc)) is None
    doc = await call(jp_fetch, "schedules", "yearly")
    assert doc["status"]["active"] is None and doc["status"]["recent"] == []
    assert (await call(jp_fetch, "jobs", params={"schedule": "yearly"}))["items"] == []


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"spec": {"schedule": "61 * * * *"}}, "spec.schedule", "minute: 61 is outside 0-59"),
    ({"spec": {"schedule": "* * *"}}, "spec.schedule", "3 fields"),
    ({"spec": {"schedule": "@often"}}, "spec.schedule", "unknown macro"),
    ({"spec": {"timeZone": "Europe/Paris"}}, "spec.timeZone", "unknown field"),
    ({"spec": {"startingDeadlineSeconds": 30}}, "spec.startingDeadlineSeconds", "unknown field"),
    ({"metadata": {"name": "x", "labels": {}}}, "metadata.labels", "unknown field"),
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name", "a-z"),
    ({"status": None, "extra": 1}, "extra", "unknown field"),
    ({"spec": {"concurrencyPolicy": "Allow"}}, "spec.concurrencyPolicy", "never runs two"),
    ({"spec": {"suspend": "yes"}}, "spec.suspend", "true or false"),
    ({"spec": {"failedJobsHistoryLimit": -1}}, "spec.failedJobsHistoryLimit", "whole number"),
    ({"job": {"bogus": 1}}, "spec.jobTemplate.spec.bogus", ""),
    # (a missing notebook: the 404 a submit answers)
    ({"job": {"notebook": {"path": "missing.ipynb"}}}, "spec.jobTemplate.spec.notebook.path", "no such notebook"),
    ({"job": {"notebook": {"git": {"url": "ftp://example.org/r.git", "ref": "main"}, "path": "a.ipynb"}}},
     "spec.jobTemplate.spec.notebook.git.url", ""),
    ({"job": {"notebook": {"git": {"url": "https://example.org/r.git", "ref": "bad..ref"}, "path": "a.ipynb"}}},
     "spec.jobTemplate.spec.notebook.git.ref", ""),
    ({"job": {"podConfig": {"credentials": ["nope"]}}}, "spec.jobTemplate.spec.podConfig.credentials[0]", ""),
    ({"template": {"metadata": {}}}, "spec.jobTemplate.metadata", "unknown field"),
    ({"job": {"podConfig": {"buildConfig": {"requirements": [
        "six", "--index-url https://ci:s3cr3t-t0ken@pypi.example.org/simple"]}}}},
     "spec.jobTemplate.spec.podConfig.buildConfig.requirements[1]", "holds a credential"),
])
async def test_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(jp_fetch, jp_root_dir, change, field,
                                                                         says):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(1)"])
    job = {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD}
    body = _schedule("s", "@daily", job)
    for key, value in change.items():
        if key == "job":
            body["spec"]["jobTemplate"]["spec"] = {**job, **value}
        elif key == "template":
            body["spec"]["jobTemplate"].update(value)
        elif key in ("spec", "metadata"):
            body[key].update(value)
        else:
            body[key] = value
    code, err = await _error(jp_fetch, "schedules", method="POST", body=body)
    assert code == (404 if "no such" in says else 400) and err["field"] == field, err
    assert field in err["message"] and says in err["message"], err
    assert "s3cr3t" not in json.dumps(err)
    assert (await call(jp_fetch, "schedules"))["items"] == []
    assert (await call(jp_fetch, "jobs"))["items"] == []


async def test_an_unknown_schedule_is_a_404_everywhere(jp_fetch):
    for parts, method, body in ((("schedules", "nope"), "GET", None), (("schedules", "nope"), "DELETE", None),
                                (("schedules", "nope"), "PATCH", {"spec": {"suspend": True}}),
                                (("schedules", "nope", "trigger"), "POST", None),
                                (("schedules", "nope", "jobs"), "GET", None)):
        code, err = await _error(jp_fetch, *parts, method=method, body=body)
        assert code == 404 and "nope" in err["message"]
    code, _ = await _error(jp_fetch, "jobs", params={"schedule": "nope"})
    assert code == 404
