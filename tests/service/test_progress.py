"""status.progress during ValidationRunning: the runner's progress records, read
by the local backend from its log as it runs and written by the engine (at most
once a second, never an event), seen through REST on a real Jupyter server with
a real kernel."""

from __future__ import annotations

from helpers import rest_call as call
from helpers import rest_wait_terminal, wait_async, write_notebook

from jupyter_nbvalidation.core.model import Phase, parse_time
from jupyter_nbvalidation.runner.protocol import ProgressReader, progress_line

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


async def test_progress_advances_mid_run_and_is_whole_at_the_end(jp_fetch, jp_root_dir):
    # notebook indexes: 0 markdown, 1..4 code (each sleeps), 5 empty code, 6 skipped by tag
    write_notebook(jp_root_dir / "sleepy.ipynb",
                   ["# md\n# Title", "import time; time.sleep(2)", "time.sleep(2)", "time.sleep(2)",
                    "time.sleep(2); print('done')", "", "raise SystemExit('skipped')"],
                   tags={6: ["skip-execution"]})
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "sleepy.ipynb"}, **NOBUILD})
    name = job["metadata"]["name"]
    seen_running: list[int] = []
    seen_while_running = []

    async def sample() -> bool:  # one look at the progress while the job runs; True once it ended
        st = (await call(jp_fetch, "jobs", name))["status"]
        if st.get("phase") in Phase.TERMINAL:
            return True
        p = st.get("progress")
        if st.get("phase") == Phase.VALIDATION_RUNNING and p:
            seen_while_running.append(p)
            if p["currentCellIndex"] is not None and p["currentCellIndex"] not in seen_running:
                seen_running.append(p["currentCellIndex"])
        return False

    await wait_async(sample, 300, f"{name} to end", interval=0.25)
    final = await rest_wait_terminal(jp_fetch, name, 60)
    st = final["status"]
    assert st["phase"] == Phase.SUCCEEDED, st
    # mid-run: the running cell (0-based notebook index) advanced
    assert len(seen_running) >= 2 and seen_running == sorted(seen_running), seen_running
    assert set(seen_running) <= {1, 2, 3, 4}
    mid = seen_while_running[0]
    assert mid["cellsTotal"] == 4 and mid["cellsDone"] < 4
    if mid["currentCellIndex"] is not None:
        assert parse_time(mid["currentCellStartedAt"]) is not None
    # at the end: whole, kept at the terminal phase
    p = st["progress"]
    assert p["cellsTotal"] == 4 and p["cellsDone"] == 4 and p["currentCellIndex"] is None
    assert [c["cellIndex"] for c in p["cells"]] == [1, 2, 3, 4]
    assert all(c["status"] == "ok" and c["executionTime"] >= 1.5 for c in p["cells"])
    assert parse_time(p["updatedAt"]) is not None
    # never an event
    events = (await call(jp_fetch, "jobs", name, "events"))["items"]
    assert [e["reason"] for e in events] == ["Accepted", "ValidationStarted", "ValidationSucceeded"]


async def test_progress_of_a_failing_run(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "fails.ipynb", ["x = 1", "# md\nnote", "x / 0", "print('never')"])
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "fails.ipynb"}, **NOBUILD})
    st = (await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 180))["status"]
    assert st["phase"] == Phase.FAILED and st["failedCellIndex"] == 2
    p = st["progress"]
    assert p["cellsTotal"] == 3 and p["cellsDone"] == 2 and p["currentCellIndex"] is None
    assert [(c["cellIndex"], c["status"]) for c in p["cells"]] == [(0, "ok"), (2, "error")]


def test_reader_takes_partial_lines_and_old_records():
    r = ProgressReader()
    assert r.snapshot() is None
    plan = (progress_line({"event": "plan", "cellsTotal": 2}) + "\n").encode()
    start = (progress_line({"event": "start", "cellIndex": 3, "time": "2026-01-01T00:00:00.000Z"}) + "\n").encode()
    assert r.feed(b"noise\n" + plan + start[:10]) is True
    assert r.snapshot()["currentCellIndex"] is None  # half a line waits
    assert r.feed(start[10:]) is True
    assert r.snapshot()["currentCellIndex"] == 3
    # a record without "event" (an older runner) is a cell's end
    assert r.feed((progress_line({"cellIndex": 3, "status": "Success", "executionTime": "1.500s"}) + "\n").encode())
    assert r.snapshot() == {"cellsTotal": 2, "cellsDone": 1, "currentCellIndex": None, "currentCellStartedAt": None,
                            "cells": [{"cellIndex": 3, "status": "ok", "executionTime": 1.5}]}
