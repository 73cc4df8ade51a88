"""SQLite job + event store for the local backend.

One file under the Jupyter data dir holds the jobs (JSON documents with a
version counter that plays the part of resourceVersion), the events, and a
schema version with ordered migrations. All SQL runs on one dedicated
thread that owns the connection, so the event loop never waits on SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import sqlite3
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from traitlets import Unicode

from ..model import Phase, isotime
from .base import AlreadyExists, Conflict, JobStore, NotFound, StoreError

# Ordered migrations: index i brings the schema from version i to i + 1.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE jobs (
            name TEXT PRIMARY KEY,
            uid TEXT NOT NULL UNIQUE,
            notebook TEXT NOT NULL,
            phase TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL,
            version INTEGER NOT NULL,
            doc TEXT NOT NULL
        )""",
        "CREATE INDEX jobs_by_created ON jobs (created DESC, name DESC)",
        "CREATE INDEX jobs_by_notebook ON jobs (notebook, created DESC, name DESC)",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            job_uid TEXT NOT NULL,
            event_time TEXT NOT NULL,
            doc TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_job ON events (job_uid, seq)",
    ],
    [
        # the phase column lets the resync query skip terminal jobs cheaply
        "CREATE INDEX jobs_by_phase ON jobs (phase)",
    ],
    [
        # an event's name is unique, as in the API server: a transition event posted
        # twice (retry, recovery after a crash) is recorded once. Older rows keep NULL.
        "ALTER TABLE events ADD COLUMN name TEXT",
        "CREATE UNIQUE INDEX events_by_name ON events (name)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
TERMINAL = tuple(sorted(Phase.TERMINAL))


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version found."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    found = row[0] if row else 0
    if found > SCHEMA_VERSION:
        raise StoreError(f"database schema version {found} is newer than this "
                         f"jupyter-nbvalidation understands ({SCHEMA_VERSION})")
    for version in range(found, SCHEMA_VERSION):
        with conn:
            for stmt in MIGRATIONS[version]:
                conn.execute(stmt)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version + 1,))
    return found


def _encode_token(created: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created, name]).encode()).decode()


def _decode_token(token: str) -> tuple[str, str]:
    try:
        created, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(created), str(name)
    except Exception:
        raise ValueError("continue token is malformed") from None


class SQLiteJobStore(JobStore):
    path = Unicode("", help="Path of the SQLite file (the local backend puts it in its data dir).")

    def __init__(self, path: str | Path | None = None, **kw: Any):
        super().__init__(**kw)
        if path is not None:
            self.path = str(path)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbvalidation-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._watchers: list[Callable[[str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- plumbing -----------------------------------------------------------
    async def _run(self, fn: Callable, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)

    def _open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        migrate(conn)
        self._conn = conn

    async def start(self) -> None:
        if self._conn is None:
            self._loop = asyncio.get_running_loop()
            await self._run(self._open)

    async def stop(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
            self._conn = None
        self._pool.shutdown(wait=False)

    def _notify(self, name: str) -> None:
        for cb in list(self._watchers):
            try:
                cb(name)
            except Exception:  # a watcher must never break a write
                self.log.exception("nbvalidation: store watcher failed")

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    @staticmethod
    def _doc(row: tuple) -> dict:
        doc = json.loads(row[0])
        doc["metadata"]["resourceVersion"] = str(row[1])
        return doc

    # -- jobs ---------------------------------------------------------------
    async def create(self, job: dict) -> dict:
        job = copy.deepcopy(job)
        meta = job["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", isotime())
        meta.pop("resourceVersion", None)
        meta["generation"] = 1
        job.setdefault("status", {})

        def op() -> dict:
            assert self._conn is not None
            try:
                with self._conn:
                    self._conn.execute(
                        "INSERT INTO jobs (name, uid, notebook, phase, created, version, doc) VALUES (?,?,?,?,?,?,?)",
                        (meta["name"], meta["uid"], job["spec"]["notebook"]["path"],
                         job["status"].get("phase", ""), meta["creationTimestamp"], 1, json.dumps(job)))
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"job {meta['name']!r} already exists") from None
            job["metadata"]["resourceVersion"] = "1"
            return job

        created = await self._run(op)
        self._notify(meta["name"])
        return created

    async def get(self, name: str) -> dict:
        def op() -> dict:
            assert self._conn is not None
            row = self._conn.execute("SELECT doc, version FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"job {name!r} not found")
            return self._doc(row)

        return await self._run(op)

    async def list(self, *, notebook: str | None = None, limit: int | None = None,
                   continue_token: str | None = None) -> tuple[list[dict], str | None]:
        where, args = [], []
        if notebook is not None:
            where.append("notebook = ?")
            args.append(notebook)
        if continue_token:
            created, name = _decode_token(continue_token)
            where.append("(created < ? OR (created = ? AND name < ?))")
            args += [created, created, name]
        sql = "SELECT doc, version, created, name FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, name DESC"
        if limit:
            sql += " LIMIT ?"
            args.append(limit + 1)

        def op() -> tuple[list[dict], str | None]:
            assert self._conn is not None
            rows = self._conn.execute(sql, args).fetchall()
            token = None
            if limit and len(rows) > limit:
                rows = rows[:limit]
                token = _encode_token(rows[-1][2], rows[-1][3])
            return [self._doc(r) for r in rows], token

        return await self._run(op)

    async def list_active(self) -> list[dict]:
        def op() -> list[dict]:
            assert self._conn is not None
            rows = self._conn.execute(
                "SELECT doc, version FROM jobs WHERE phase NOT IN (?, ?) ORDER BY created", TERMINAL).fetchall()
            return [self._doc(r) for r in rows]

        return await self._run(op)

    def _replace(self, name: str, resource_version: str | None, mutate: Callable[[dict], None]) -> dict:
        assert self._conn is not None
        with self._conn:
            row = self._conn.execute("SELECT doc, version FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"job {name!r} not found")
            if resource_version is not None and str(row[1]) != str(resource_version):
                raise Conflict(f"job {name!r} was modified (resourceVersion {row[1]}, "
                               f"write based on {resource_version})")
            doc = json.loads(row[0])
            mutate(doc)
            version = row[1] + 1
            cur = self._conn.execute(
                "UPDATE jobs SET doc = ?, version = ?, phase = ? WHERE name = ? AND version = ?",
                (json.dumps(doc), version, doc.get("status", {}).get("phase", ""), name, row[1]))
            if cur.rowcount != 1:  # pragma: no cover - single writer thread
                raise Conflict(f"job {name!r} was modified concurrently")
        doc["metadata"]["resourceVersion"] = str(version)
        return doc

    async def update_status(self, name: str, status: dict, resource_version: str) -> dict:
        status = copy.deepcopy(status)

        def mutate(doc: dict) -> None:
            doc["status"] = status

        doc = await self._run(self._replace, name, resource_version, mutate)
        self._notify(name)
        return doc

    async def set_annotation(self, name: str, key: str, value: str) -> dict:
        def mutate(doc: dict) -> None:
            doc["metadata"].setdefault("annotations", {})[key] = value

        doc = await self._run(self._replace, name, None, mutate)
        self._notify(name)
        return doc

    async def delete(self, name: str) -> None:
        def op() -> None:
            assert self._conn is not None
            with self._conn:
                row = self._conn.execute("SELECT uid FROM jobs WHERE name = ?", (name,)).fetchone()
                if row is None:
                    raise NotFound(f"job {name!r} not found")
                self._conn.execute("DELETE FROM jobs WHERE name = ?", (name,))
                self._conn.execute("DELETE FROM events WHERE job_uid = ?", (row[0],))

        await self._run(op)

    # -- events -------------------------------------------------------------
    async def add_event(self, event: dict) -> dict:
        event = copy.deepcopy(event)

        def op() -> dict:
            assert self._conn is not None
            with self._conn:
                cur = self._conn.execute(
                    "INSERT OR IGNORE INTO events (job_uid, event_time, doc, name) VALUES (?,?,?,?)",
                    (event["regarding"]["uid"], event["eventTime"], json.dumps(event), event["metadata"]["name"]))
                if cur.rowcount == 0:  # already recorded under this name: keep the first
                    seq, doc = self._conn.execute("SELECT seq, doc FROM events WHERE name = ?",
                                                  (event["metadata"]["name"],)).fetchone()
                    stored = json.loads(doc)
                    stored["metadata"]["resourceVersion"] = str(seq)
                    return stored
            event["metadata"]["resourceVersion"] = str(cur.lastrowid)
            return event

        return await self._run(op)

    async def list_events(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]

        def op() -> list[dict]:
            assert self._conn is not None
            rows = self._conn.execute(
                "SELECT doc, seq FROM events WHERE job_uid = ? ORDER BY seq", (uid,)).fetchall()
            out = []
            for doc, seq in rows:
                ev = json.loads(doc)
                ev["metadata"]["resourceVersion"] = str(seq)
                out.append(ev)
            return out

        return await self._run(op)
