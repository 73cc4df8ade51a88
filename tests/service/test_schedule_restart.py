"""A schedule survives its server: a real Jupyter server stops, the ticks of a few periods pass
while it is down, and the server started again on the same data dir runs exactly one catch-up run
(not one per missed tick), then ticks on its period again. The server takes a seconds field in
its cron expressions (``--NBValidation.schedule_seconds_field=True``, tests only)."""

from __future__ import annotations

import datetime as dt
import time

from helpers import wait, write_notebook

from jupyter_nbvalidation.core import cron
from jupyter_nbvalidation.core.model import Phase

EVERY = "*/4 * * * * *"  # every 4 s
ARGS = ["--NBValidation.schedule_seconds_field=True"]


def _time(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def _runs(api) -> list[dict]:
    return [api.request("GET", f"jobs/{i['metadata']['name']}")
            for i in api.request("GET", "schedules/tick/jobs")["items"]]


def test_a_restart_runs_one_catch_up_for_the_ticks_missed_then_ticks_again(server_proc):
    server = server_proc("first")
    server.extra_args = ARGS
    server.start()
    write_notebook(server.root / "ok.ipynb", ["print(1)"])
    api = server.client()
    api.request("POST", "schedules", {"metadata": {"name": "tick"}, "spec": {"schedule": EVERY, "jobTemplate": {
        "spec": {"notebook": {"path": "ok.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}}}}})
    wait(lambda: len(_runs(api)) >= 1, 60, "a first run")
    wait(lambda: all(j["status"].get("phase") in Phase.TERMINAL for j in _runs(api)), 60, "the runs to end")
    skipped_before = api.request("GET", "schedules/tick")["status"]["skipped"]
    server.stop()
    stopped = dt.datetime.now(dt.timezone.utc)
    before = {j["metadata"]["name"] for j in _runs_stored(server)}
    time.sleep(13)  # three ticks or more go by with nobody looking

    again = server_proc("second")
    again.root, again.data_dir, again.runtime, again.token = server.root, server.data_dir, server.runtime, server.token
    again.extra_args = ARGS
    again.start()
    up = dt.datetime.now(dt.timezone.utc)
    api2 = again.client()
    missed = _ticks(stopped, up)
    assert len(missed) >= 3, missed
    new = wait(lambda: [j for j in _runs(api2) if j["metadata"]["name"] not in before], 60, "the catch-up run")
    catch_up = min(new, key=lambda j: j["metadata"]["creationTimestamp"])
    doc = api2.request("GET", "schedules/tick")
    # the missed ticks were not walked one by one either (each a run, or a skip behind the first)
    assert doc["status"]["skipped"] - skipped_before <= 1, (doc["status"], missed)
    # ... then the schedule ticks on: a run (or a counted skip) at a tick after the restart
    regular = cron.parse(EVERY, seconds=True).next_after(_time(catch_up["metadata"]["creationTimestamp"]))
    wait(lambda: _time(api2.request("GET", "schedules/tick")["status"]["lastScheduleTime"] or "1970-01-01T00:00:00Z")
         >= regular or api2.request("GET", "schedules/tick")["status"]["skipped"] > doc["status"]["skipped"],
         60, "a tick after the catch-up")
    after = [j for j in _runs(api2) if j["metadata"]["name"] not in before]
    early = [j for j in after if _time(j["metadata"]["creationTimestamp"]) < regular]
    assert [j["metadata"]["name"] for j in early] == [catch_up["metadata"]["name"]], \
        "one catch-up run for the ticks missed, not one per tick"
    assert _time(catch_up["metadata"]["creationTimestamp"]) >= up - dt.timedelta(seconds=5)


def _ticks(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    c, out, t = cron.parse(EVERY, seconds=True), [], start
    while (t := c.next_after(t)) <= end:
        out.append(t)
    return out


def _runs_stored(server) -> list[dict]:
    import json
    import sqlite3

    conn = sqlite3.connect(server.data_dir / "nbvalidation.db")
    try:
        return [json.loads(r[0]) for r in conn.execute("SELECT doc FROM jobs")]
    finally:
        conn.close()


def test_only_the_leader_runs_ticks_and_sees_a_schedule_made_through_the_follower(server_proc):
    """Two servers on one data dir: the one holding the lease runs the ticks; a schedule created
    through the other (a follower, which runs none) is seen by the leader within its
    schedule_max_sleep."""
    first = server_proc("leader")
    first.extra_args = [*ARGS, "--NBValidation.schedule_max_sleep=1"]
    first.start()
    wait(lambda: first.client().request("GET", "health")["engine"]["leading"], 60, "the first server to lead")
    second = server_proc("follower")
    second.extra_args = [*ARGS, "--NBValidation.schedule_max_sleep=1"]
    second.start()
    assert not second.client().request("GET", "health")["engine"]["leading"]
    write_notebook(first.root / "ok.ipynb", ["print(1)"])
    follower = second.client()
    follower.request("POST", "schedules", {"metadata": {"name": "tick"}, "spec": {"schedule": "*/2 * * * * *",
                     "jobTemplate": {"spec": {"notebook": {"path": "ok.ipynb"},
                                              "podConfig": {"buildConfig": {"enabled": False}}}}}})
    wait(lambda: len(_runs(follower)) >= 2, 90, "two runs of the schedule made through the follower")
    said = "submitted for the tick"
    assert said in first.log_path.read_text()
    assert said not in second.log_path.read_text(), "the follower ran a tick"
