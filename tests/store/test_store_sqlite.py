"""The SQLite store: optimistic concurrency, pagination, ordered migrations."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
import pytest_asyncio

from jupyter_nbvalidation.core.model import Phase, new_job
from jupyter_nbvalidation.engine.transitions import new_status
from jupyter_nbvalidation.store.base import AlreadyExists, Conflict, NotFound, StoreError
from jupyter_nbvalidation.store.sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteJobStore, migrate


@pytest_asyncio.fixture
async def store(tmp_path):
    s = SQLiteJobStore(path=tmp_path / "db.sqlite")
    await s.start()
    yield s
    await s.stop()


def _job(path="nb.ipynb", name=None):
    return new_job({"notebook": {"path": path}}, name=name)


@pytest.mark.asyncio
async def test_resource_version_conflicts(store):
    job = await store.create(_job(name="a"))
    assert job["metadata"]["resourceVersion"] == "1" and job["metadata"]["uid"]
    with pytest.raises(AlreadyExists):
        await store.create(_job(name="a"))
    st = new_status(job, Phase.INITIALIZING, "Accepted", "x")
    moved = await store.update_status("a", st, "1")
    assert moved["metadata"]["resourceVersion"] == "2"
    with pytest.raises(Conflict):
        await store.update_status("a", st, "1")  # stale
    with pytest.raises(NotFound):
        await store.update_status("zzz", st, "1")
    # concurrent writers from the same version: exactly one wins
    results = await asyncio.gather(*[store.update_status("a", st, "2") for _ in range(5)],
                                   return_exceptions=True)
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, Exception))


@pytest.mark.asyncio
async def test_list_newest_first_paginated_and_filtered(store):
    names = []
    for i in range(7):
        job = await store.create(_job(path="x.ipynb" if i % 2 else "y.ipynb", name=f"job-{i}"))
        names.append(job["metadata"]["name"])
        await asyncio.sleep(0.001)
    seen, token = [], None
    while True:
        items, token = await store.list_jobs(limit=3, continue_token=token)
        seen += [j["metadata"]["name"] for j in items]
        if not token:
            break
    assert seen == names[::-1]
    only_x, _ = await store.list_jobs(notebook="x.ipynb")
    assert [j["metadata"]["name"] for j in only_x] == ["job-5", "job-3", "job-1"]
    with pytest.raises(ValueError):
        await store.list_jobs(continue_token="%%%")
    active = await store.list_active()
    assert len(active) == 7


@pytest.mark.asyncio
async def test_events_are_stored_per_job_in_order(store):
    job = await store.create(_job(name="e"))
    other = await store.create(_job(name="f"))
    for i, j in enumerate([job, other, job]):
        await store.add_event({"metadata": {"name": f"ev{i}"}, "eventTime": f"2026-01-01T00:00:0{i}Z",
                               "reason": f"R{i}", "regarding": {"uid": j["metadata"]["uid"]}})
    assert [e["reason"] for e in await store.list_events(job)] == ["R0", "R2"]
    # a name is recorded once, like on the API server: the first stays
    again = await store.add_event({"metadata": {"name": "ev0"}, "eventTime": "2026-01-01T00:00:09Z",
                                   "reason": "Again", "regarding": {"uid": job["metadata"]["uid"]}})
    assert again["reason"] == "R0"
    assert [e["reason"] for e in await store.list_events(job)] == ["R0", "R2"]
    await store.delete("e")
    assert await store.list_events(job) == []


def test_migrations_from_every_older_version(tmp_path):
    for start in range(SCHEMA_VERSION):
        path = tmp_path / f"v{start}.sqlite"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for v in range(start):
            for stmt in MIGRATIONS[v]:
                conn.execute(stmt)
        conn.execute("INSERT INTO schema_version VALUES (?)", (start,))
        if start >= 1:  # a database with data in it keeps its data
            conn.execute("INSERT INTO jobs (name, uid, notebook, phase, created, version, doc) "
                         "VALUES ('old', 'u', 'nb.ipynb', 'Succeeded', '2026', 3, ?)",
                         (json.dumps(_job(name="old")),))
            for _ in range(2):  # events from before they had a unique name
                conn.execute("INSERT INTO events (job_uid, event_time, doc) VALUES ('u', '2026', '{}')")
        assert migrate(conn) == start
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"jobs_by_created", "jobs_by_notebook", "events_by_job", "jobs_by_phase", "events_by_name"} <= indexes
        assert conn.execute("SELECT count(*) FROM schedules").fetchone() == (0,)  # an old data dir gets the table
        if start >= 1:
            assert conn.execute("SELECT name FROM jobs").fetchall() == [("old",)]
            assert conn.execute("SELECT count(*) FROM events WHERE job_uid = 'u'").fetchone() == (2,)
        assert migrate(conn) == SCHEMA_VERSION  # idempotent
        conn.close()


def test_newer_schema_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "new.sqlite", isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer"):
        migrate(conn)


def _open_at_once(path: str, barrier, results) -> None:
    try:
        barrier.wait(30)
        store = SQLiteJobStore(path)
        store._open()  # what every store does first: WAL, then the migrations
        results.put("ok")
    except BaseException as e:  # reported, not raised: the parent says which
        results.put(f"{type(e).__name__}: {e}")


def test_processes_opening_one_new_file_at_once_migrate_it_once(tmp_path):
    """pytest-xdist workers (or a CLI beside a server) on a fresh data dir: each one
    opens the store, none fails with 'table jobs already exists' (a false failure of
    whatever it was about to validate), and the schema is there once."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    # 40 rounds of 6: the lock clash of the WAL switch (store.sqlite.enable_wal) came
    # in about one round in 16 before it was retried
    for attempt in range(40):
        path = str(tmp_path / f"fresh-{attempt}.sqlite")
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(path, barrier, results)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert got == ["ok"] * 6, got
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        conn.close()
