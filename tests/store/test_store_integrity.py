"""A damaged store is named at once and recovered: PRAGMA quick_check when the store opens and
after any DatabaseError makes a damaged file unusable (every call a StoreBroken that names the
file and `store recover`), the CLI exits 3 with one line, and `store check` / `store recover`
salvage what can be read into a new file, keeping the damaged one beside it. Real SQLite files,
damaged in the middle as a disk fault does; real CLI processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from pathlib import Path

import pytest
from helpers import cli

from jupyter_nbvalidation.core.model import new_job
from jupyter_nbvalidation.store.base import StoreBroken
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore

JOBS = 300


async def _filled(path: Path) -> list[str]:
    """A store at ``path`` with JOBS jobs (a page-filling doc each) and one event each, closed."""
    store = SQLiteJobStore(path=path)
    await store.start()
    names = []
    try:
        for i in range(JOBS):
            job = new_job({"notebook": {"path": f"nb{i:03d}.ipynb"}}, name=f"job-{i:03d}")
            job["metadata"]["annotations"] = {"filler": "x" * 1500}
            job = await store.create(job)
            await store.add_event({"metadata": {"name": f"ev-{i:03d}"}, "reason": "Accepted", "type": "Normal",
                                   "note": f"event of {i}", "eventTime": "2026-12-07T00:00:00.000000Z",
                                   "regarding": {"name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}})
            names.append(job["metadata"]["name"])
    finally:
        await store.stop()
    return names


def _damage(path: Path) -> None:
    """Garbage over pages in the middle of the file (its WAL checkpointed first)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page, count = conn.execute("PRAGMA page_size").fetchone()[0], conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        for n in (count // 2, count // 2 + 1, count // 3):
            f.seek(n * page)
            f.write(os.urandom(page))


@pytest.mark.asyncio
async def test_a_damaged_store_is_refused_when_opened_naming_the_file_and_the_recovery(tmp_path):
    path = tmp_path / "nbvalidation.db"
    await _filled(path)
    _damage(path)
    store = SQLiteJobStore(path=path)
    with pytest.raises(StoreBroken) as e:
        await store.start()
    assert str(path) in str(e.value) and "damaged" in str(e.value) and "store recover" in str(e.value)
    assert store.problem == str(e.value)
    await store.stop()


@pytest.mark.asyncio
async def test_damage_met_while_running_makes_the_store_unusable_at_once(tmp_path):
    path = tmp_path / "nbvalidation.db"
    names = await _filled(path)
    store = SQLiteJobStore(path=path)
    await store.start()  # sound now: nothing of the jobs read yet
    try:
        _damage(path)
        with pytest.raises(StoreBroken) as e:  # reading every job reaches the damaged pages
            for name in names:
                await store.get(name)
        assert "damaged" in str(e.value) and "store recover" in str(e.value)
        assert store.problem and "damaged" in store.problem  # /health: usable false, with this
        with pytest.raises(StoreBroken):  # unusable at once: not even a page that is sound is read
            await store.get(names[0])
    finally:
        await store.stop()


@pytest.mark.asyncio
async def test_the_cli_names_it_in_one_line_and_store_recover_salvages_it(tmp_path):
    data = tmp_path / "data"
    path = data / "nbvalidation.db"
    names = await _filled(path)
    _damage(path)
    root = tmp_path / "proj"
    root.mkdir()

    def go(*args):
        return cli(*args, "--local", "--data-dir", str(data), cwd=root, no_servers=True, timeout=300)

    listed = go("list")
    assert listed.returncode == 3, listed.stdout + listed.stderr
    lines = [ln for ln in listed.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "store recover" in lines[0], listed.stderr

    checked = go("store", "check")
    assert checked.returncode == 3 and "damaged" in checked.stdout, checked.stdout + checked.stderr

    recovered = go("store", "recover", "-o", "json")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    report = json.loads(recovered.stdout)
    kept = Path(report["damagedFile"])
    assert kept.parent == data and kept.is_file() and kept.name.startswith("nbvalidation.db.damaged-")
    assert 0 < report["rows"]["jobs"] < JOBS and report["unreadable"], report  # what the damage took, and only that

    assert go("store", "check").returncode == 0
    after = go("list", "--limit", "500", "-o", "json")
    assert after.returncode == 0, after.stderr
    got = {j["metadata"]["name"] for j in json.loads(after.stdout)["items"]}
    assert len(got) == report["rows"]["jobs"] and got <= set(names)
    # the salvaged jobs keep their events
    some = sorted(got)[0]
    events = go("events", some, "-o", "json")
    assert events.returncode == 0 and json.loads(events.stdout)["items"], events.stdout + events.stderr


@pytest.mark.asyncio
async def test_store_recover_refuses_while_another_process_holds_the_store(tmp_path):
    data = tmp_path / "data"
    path = data / "nbvalidation.db"
    await _filled(path)
    holder = SQLiteJobStore(path=path)
    await holder.start()
    try:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert await holder.put_lease("nbvalidation", {"holderIdentity": "a-server", "acquireTime": now,
                                                       "renewTime": now, "leaseDurationSeconds": 60,
                                                       "leaseTransitions": 0}, None)
        proc = cli("store", "recover", "--local", "--data-dir", str(data), cwd=tmp_path, no_servers=True)
        assert proc.returncode == 2 and "a-server" in proc.stderr and "stop it first" in proc.stderr, proc.stderr
        assert not list(data.glob("nbvalidation.db.damaged-*"))
    finally:
        await holder.stop()
