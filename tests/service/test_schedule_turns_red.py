"""Issue 45 end to end, on a real Jupyter server with the local backend: a schedule (its loop, not
a hand-made job) over a real git repository validates a ref every two seconds; a push that breaks
a cell turns it red, and a real webhook receiver on loopback gets, by itself and signed, the
notification that names the commit as the cause (not the environment); the fix turns it green
and says so. The server is configured the way a user configures it (traits), nothing set by hand."""

from __future__ import annotations

import json

import pytest
from git_support import Repo
from helpers import rest_call as call
from helpers import wait_async
from webhook_receiver import Receiver, verified

from jupyter_nbvalidation.core.model import Phase

KEY = "hooks-key-never-in-a-payload"


@pytest.fixture
def jp_server_config(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("NBV_TEST_HOOKS_KEY", KEY)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
        "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
        "NBValidation": {"schedule_seconds_field": True, "webhook_backoff": 0.1,
                         "secrets": {"hooks": {"fromEnv": {"key": "NBV_TEST_HOOKS_KEY"}}},
                         "webhooks": [{"url": receiver.url, "secret": "hooks"}]},
    }


def _events(receiver: Receiver) -> list[str]:
    return [body["event"] for body, _ in receiver.got]


async def test_a_push_that_breaks_a_cell_is_named_to_the_webhook_by_itself(jp_fetch, tmp_path, receiver):
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    repo.commit("first")
    spec = {"notebook": {"git": {"url": repo.url, "ref": "main"}, "path": "nbs/check.ipynb"},
            "podConfig": {"buildConfig": {"enabled": False}}}
    schedule = {"metadata": {"name": "nightly"},
                "spec": {"schedule": "*/2 * * * * *", "jobTemplate": {"spec": spec}}}
    await call(jp_fetch, "schedules", method="POST", body=schedule)

    async def run_of(commit: str, phase: str) -> dict | None:
        doc = await call(jp_fetch, "schedules", "nightly")
        return next((r for r in doc["status"]["recent"] if r["commit"] == commit and r["phase"] == phase), None)

    async def paused(flag: bool) -> None:
        await call(jp_fetch, "schedules", "nightly", method="PATCH", body={"spec": {"suspend": flag}})

    first = repo.commit("nothing yet")  # a second commit before the first run: the runs follow the branch
    await wait_async(lambda: run_of(first, Phase.SUCCEEDED), 120, "a green run")
    await paused(True)
    repo.notebook("nbs/check.ipynb", ["x = 2", "assert x == 1, 'x moved'"])
    breaking = repo.commit("x is two now")
    await paused(False)
    red = await wait_async(lambda: run_of(breaking, Phase.FAILED), 120, "a red run at the breaking commit")
    await wait_async(lambda: "turned-red" in _events(receiver) or None, 120, "the turned-red notification")
    await paused(True)

    body, headers = receiver.got[_events(receiver).index("turned-red")]
    assert body["schedule"] == "nightly" and body["job"]["name"] == red["job"]
    assert body["job"]["source"]["commit"] == breaking
    culprit = body["culprit"]
    assert culprit["kind"] == "commit" and culprit["commit"] == breaking, culprit
    assert "x is two now" in json.dumps(culprit)
    assert body["changes"]["cells"]["edited"] == [1], body["changes"]
    assert body["changes"]["commits"]["items"][0]["commit"] == breaking
    assert _events(receiver).count("turned-red") == 1  # a series that stays red says nothing more
    raw = [r for r in receiver.raws if json.loads(r)["event"] == "turned-red"][0]
    assert verified(raw, headers, KEY) and KEY not in raw.decode()

    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    fixed = repo.commit("x is one again")
    await paused(False)
    await wait_async(lambda: run_of(fixed, Phase.SUCCEEDED), 120, "a green run at the fix")
    await wait_async(lambda: "back-to-green" in _events(receiver) or None, 60, "the back-to-green notification")
    await paused(True)
    listed = await call(jp_fetch, "notifications")
    assert [i["event"] for i in listed["items"]][:2] == ["back-to-green", "turned-red"]
