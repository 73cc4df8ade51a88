"""SQLite job + event store for the local backend.

One file under the Jupyter data dir holds the jobs (JSON documents with a
version counter that plays the part of resourceVersion), the events, and a
schema version with ordered migrations, a Lease (which process reconciles;
see store/lease.py) and a change log that lets each process notice what the
others wrote. Job SQL runs on one dedicated thread that owns the connection,
lease SQL on a second one, so the event loop never waits on SQLite and a
slow query never delays a lease renewal.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar, cast

from traitlets import Float, Unicode

import jupyter_nbvalidation.core.space as space
from jupyter_nbvalidation.core.documents import Event, Job, JobStatus
from jupyter_nbvalidation.core.errors import NoSpace
from jupyter_nbvalidation.core.model import Phase, isotime
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.store.base import (
    AlreadyExists,
    Conflict,
    JobStore,
    NotFound,
    StoreBroken,
    StoreError,
    owner_of,
)
from jupyter_nbvalidation.store.schedules import SCHEDULE_TABLES, ScheduleTables

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
    [
        # one reconciler per data dir: a Lease row (coordination.k8s.io/v1 Lease fields)
        """CREATE TABLE leases (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL DEFAULT '',
            acquire_time TEXT,
            renew_time TEXT,
            duration_seconds INTEGER NOT NULL,
            transitions INTEGER NOT NULL DEFAULT 0,
            version INTEGER NOT NULL
        )""",
        # SQLite has no cross-process notification: every job write appends the job's
        # name here (triggers, so no writer can forget), and each process polls the
        # rows after the last one it saw
        "CREATE TABLE job_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL)",
        "CREATE TRIGGER jobs_changed_ins AFTER INSERT ON jobs BEGIN "
        "INSERT INTO job_changes (name) VALUES (NEW.name); END",
        "CREATE TRIGGER jobs_changed_upd AFTER UPDATE ON jobs BEGIN "
        "INSERT INTO job_changes (name) VALUES (NEW.name); END",
        "CREATE TRIGGER jobs_changed_del AFTER DELETE ON jobs BEGIN "
        "INSERT INTO job_changes (name) VALUES (OLD.name); END",
    ],
    [
        # who submitted a job (its label nbvalidation.dev/owner, a JupyterHub user): a user's
        # list is one indexed query. Older rows keep NULL (no owner: a single user's server)
        "ALTER TABLE jobs ADD COLUMN owner TEXT",
        "CREATE INDEX jobs_by_owner ON jobs (owner, created DESC, name DESC)",
    ],
    SCHEDULE_TABLES,  # schedules (store/schedules.py)
]
#: rows of job_changes kept (a process further behind than this relies on the resync)
CHANGES_KEPT = 10000
SCHEMA_VERSION = len(MIGRATIONS)
TERMINAL = tuple(sorted(Phase.TERMINAL))
T = TypeVar("T")


def _schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    found = int(row[0]) if row else 0
    if found > SCHEMA_VERSION:
        raise StoreError(f"database schema version {found} is newer than this "
                         f"jupyter-nbvalidation understands ({SCHEMA_VERSION})")
    return found


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version found. Processes
    opening one new file at once (pytest-xdist workers, a CLI beside a server)
    migrate it once: the version is read again, and every migration run, in one
    write transaction (``BEGIN IMMEDIATE``: the others wait, then find it done)."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    if conn.in_transaction:
        conn.commit()
    if _schema_version(conn) == SCHEMA_VERSION:
        return SCHEMA_VERSION
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = _schema_version(conn)
        for version in range(found, SCHEMA_VERSION):
            for stmt in MIGRATIONS[version]:
                conn.execute(stmt)
        if found < SCHEMA_VERSION:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return found


def enable_wal(conn: sqlite3.Connection, within: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, waiting for the other processes that open the
    same new file at once. SQLite answers this pragma "database is locked" at once,
    without calling the busy handler, while another connection converts the file, so
    ``busy_timeout`` does not cover it: it is tried again, with jitter, for ``within``
    seconds (the busy timeout) before the store says it cannot be opened."""
    deadline = time.monotonic() + within
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            if time.monotonic() >= deadline:
                raise StoreError(f"the job store stayed locked by another process for {within:g} s: {e}") from e
            time.sleep(0.005 + 0.05 * random.random())


def _encode_token(created: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created, name]).encode()).decode()


def _decode_token(token: str) -> tuple[str, str]:
    try:
        created, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(created), str(name)
    except Exception:
        raise ValueError("continue token is malformed") from None


class SQLiteJobStore(ScheduleTables, JobStore):
    path = Unicode("", help="Path of the SQLite file (the local backend puts it in its data dir).")
    change_poll_interval = Float(0.2, help="Seconds between two looks for jobs written by other processes "
                                           "on the same file (one indexed SELECT).").tag(config=True)

    def __init__(self, path: str | Path | None = None, **kw: Any):
        super().__init__(**kw)
        if path is not None:
            self.path = str(path)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbvalidation-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._watchers: list[Callable[[str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # the lease has its own thread and connection: a slow job query never delays a renewal
        self._lease_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbvalidation-lease")
        self._lease_conn: sqlite3.Connection | None = None
        self._change_seq = 0
        self._poller: asyncio.Task[None] | None = None
        self.changes_seen = 0  # names notified because another process wrote them
        self.damaged: str | None = None  # what PRAGMA quick_check found wrong: the store is unusable

    # -- plumbing -----------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call(self._pool, fn, *args)

    async def _run_lease(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call(self._lease_pool, fn, *args)

    async def _call(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` on the store's thread. SQLite's own errors leave as StoreErrors that name
        the file: a file that is not a database (or a corrupt one) is StoreBroken, and
        :attr:`problem` says so until a call succeeds again; a lock held too long, a full
        disk or an unopenable file is a StoreError (callers retry)."""
        loop = asyncio.get_running_loop()
        if self.damaged is not None:  # found damaged: unusable at once, until it is recovered
            raise StoreBroken(self.damaged)
        try:
            result = await loop.run_in_executor(pool, fn, *args)
        except sqlite3.OperationalError as e:
            # a full disk reaches SQLite as "database or disk is full", or as "disk I/O error" when the
            # WAL cannot grow: say which device and how much is free, not "try again"
            if space.is_no_space(e) or ("disk i/o error" in str(e).lower() and space.nearly_full(self.path)):
                full = NoSpace(f"the job store {self.path} could not be written: {space.no_space(self.path)}")
                self.no_space, self.no_space_at = full, time.monotonic()
                raise full from e
            raise StoreError(f"the job store {self.path} failed: {e}") from e
        except sqlite3.DatabaseError as e:  # not a database, malformed, ... (IntegrityError is handled inside)
            self.problem = f"the job store {self.path} cannot be read ({type(e).__name__}: {e})"
            # is the file itself damaged (not one odd statement)? then nothing more is read or written
            found = await loop.run_in_executor(pool, self._check_file)
            if found is not None:
                self.damaged = self.problem = found
            raise StoreBroken(self.problem) from e
        self.problem = None
        return result

    def _check_file(self) -> str | None:
        """``PRAGMA quick_check`` of the file (on the store's thread): None when it is sound, else
        what is wrong, with the file and how to recover."""
        try:
            conn = self._conn or sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                rows = conn.execute("PRAGMA quick_check(5)").fetchall()
            finally:
                if conn is not self._conn:
                    conn.close()
            found = "; ".join(str(r[0]) for r in rows)
        except sqlite3.OperationalError:
            return None  # locked, busy, no space: not damage (the caller's StoreError says what)
        except sqlite3.DatabaseError as e:
            found = f"{type(e).__name__}: {e}"
        if found == "ok":
            return None
        return (f"the job store {self.path} is damaged ({found[:300]}); stop what uses it, then run "
                "`jupyter nbvalidation store recover` (it salvages what it can into a new file and keeps the "
                "damaged one beside it)")

    def _open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        enable_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        migrate(conn)
        self._conn = conn
        found = self._check_file()
        if found is not None:
            self._conn = None
            conn.close()
            self.problem = found  # not self.damaged: the next start looks again (a recovered file)
            raise StoreBroken(found)
        self._change_seq = conn.execute("SELECT coalesce(max(seq), 0) FROM job_changes").fetchone()[0]

    def _open_lease(self) -> None:
        # a renewal that cannot get the write lock quickly fails this round (the elector
        # retries; after renew_deadline it steps down) instead of waiting 30 s
        conn = sqlite3.connect(self.path, timeout=2, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=2000")
        self._lease_conn = conn

    async def start(self) -> None:
        if self._conn is None:
            self.damaged = None  # looked at again when it opens (a file recovered since)
            self._loop = asyncio.get_running_loop()
            await self._run(self._open)
            await self._run_lease(self._open_lease)
            self._poller = self._loop.create_task(self._poll_changes(), name="nbvalidation-sqlite-changes")

    async def stop(self) -> None:
        if self._poller is not None:
            await cancel_and_wait(self._poller)
            self._poller = None
        loop = asyncio.get_running_loop()  # closing is not a use: a damaged store closes too
        if self._lease_conn is not None:
            await loop.run_in_executor(self._lease_pool, self._lease_conn.close)
            self._lease_conn = None
        if self._conn is not None:
            await loop.run_in_executor(self._pool, self._conn.close)
            self._conn = None
        self._pool.shutdown(wait=False)
        self._lease_pool.shutdown(wait=False)

    # -- changes made by other processes ----------------------------------------
    def _read_changes(self, after: int, prune: bool) -> list[tuple[int, str]]:
        assert self._conn is not None
        rows = self._conn.execute("SELECT seq, name FROM job_changes WHERE seq > ? ORDER BY seq LIMIT 1000",
                                  (after,)).fetchall()
        if prune:
            with self._conn:
                self._conn.execute("DELETE FROM job_changes WHERE seq <= "
                                   "(SELECT max(seq) FROM job_changes) - ?", (CHANGES_KEPT,))
        return rows

    async def poll_changes_once(self, prune: bool = False) -> int:
        """Notify the watchers of every job written since the last look (by any
        process, this one included: a watcher is idempotent); returns how many."""
        rows = await self._run(self._read_changes, self._change_seq, prune)
        if not rows:
            return 0
        self._change_seq = rows[-1][0]
        names = list(dict.fromkeys(name for _, name in rows))
        self.changes_seen += len(names)
        for name in names:
            self._notify(name)
        return len(names)

    async def _poll_changes(self) -> None:
        polls = 0
        while True:
            await asyncio.sleep(self.change_poll_interval)
            polls += 1
            try:
                while await self.poll_changes_once(prune=polls % 3000 == 0) >= 1000:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a busy or briefly locked file: look again next time
                self.log.debug("nbvalidation: polling job changes failed: %s", e)

    # -- the lease ---------------------------------------------------------------
    @staticmethod
    def _lease_doc(row: tuple[Any, ...] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {"holderIdentity": row[0], "acquireTime": row[1], "renewTime": row[2],
                "leaseDurationSeconds": row[3], "leaseTransitions": row[4], "resourceVersion": str(row[5])}

    async def get_lease(self, name: str) -> dict[str, Any] | None:
        """The Lease record (``holderIdentity``, ``acquireTime``, ``renewTime``,
        ``leaseDurationSeconds``, ``leaseTransitions``, ``resourceVersion``) or None."""
        def op() -> dict[str, Any] | None:
            assert self._lease_conn is not None
            return self._lease_doc(self._lease_conn.execute(
                "SELECT holder, acquire_time, renew_time, duration_seconds, transitions, version "
                "FROM leases WHERE name = ?", (name,)).fetchone())

        return await self._run_lease(op)

    async def put_lease(self, name: str, spec: dict[str, Any], resource_version: str | None) -> bool:
        """Write the Lease if it is still at ``resource_version`` (None: create it);
        False when another process wrote it first (the 409 of the API server)."""
        def op() -> bool:
            assert self._lease_conn is not None
            values = (spec.get("holderIdentity") or "", spec.get("acquireTime"), spec.get("renewTime"),
                      int(spec["leaseDurationSeconds"]), int(spec.get("leaseTransitions") or 0))
            with self._lease_conn:
                if resource_version is None:
                    try:
                        self._lease_conn.execute(
                            "INSERT INTO leases (holder, acquire_time, renew_time, duration_seconds, transitions, "
                            "version, name) VALUES (?,?,?,?,?,1,?)", (*values, name))
                    except sqlite3.IntegrityError:
                        return False
                    return True
                cur = self._lease_conn.execute(
                    "UPDATE leases SET holder = ?, acquire_time = ?, renew_time = ?, duration_seconds = ?, "
                    "transitions = ?, version = version + 1 WHERE name = ? AND version = ?",
                    (*values, name, int(resource_version)))
                return cur.rowcount == 1

        return await self._run_lease(op)

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
    def _doc(row: tuple[Any, ...]) -> Job:
        doc = json.loads(row[0])
        doc["metadata"]["resourceVersion"] = str(row[1])
        return cast(Job, doc)

    # -- jobs ---------------------------------------------------------------
    async def create(self, new: Job) -> Job:
        job: dict[str, Any] = copy.deepcopy(dict(new))
        meta = job["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", isotime())
        meta.pop("resourceVersion", None)
        meta["generation"] = 1
        job.setdefault("status", {})

        def op() -> Job:
            assert self._conn is not None
            try:
                with self._conn:
                    self._conn.execute(
                        "INSERT INTO jobs (name, uid, notebook, phase, created, version, doc, owner) "
                        "VALUES (?,?,?,?,?,?,?,?)",
                        (meta["name"], meta["uid"], job["spec"]["notebook"]["path"],
                         job["status"].get("phase", ""), meta["creationTimestamp"], 1, json.dumps(job),
                         owner_of(cast(Job, job))))
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"job {meta['name']!r} already exists") from None
            job["metadata"]["resourceVersion"] = "1"
            return cast(Job, job)

        created = await self._run(op)
        self._notify(meta["name"])
        return created

    async def get(self, name: str) -> Job:
        def op() -> Job:
            assert self._conn is not None
            row = self._conn.execute("SELECT doc, version FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"job {name!r} not found")
            return self._doc(row)

        return await self._run(op)

    async def list_jobs(self, *, notebook: str | None = None, limit: int | None = None,
                   continue_token: str | None = None, owner: str | None = None) -> tuple[list[Job], str | None]:
        where: list[str] = []
        args: list[Any] = []
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
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

        def op() -> tuple[list[Job], str | None]:
            assert self._conn is not None
            rows = self._conn.execute(sql, args).fetchall()
            token = None
            if limit and len(rows) > limit:
                rows = rows[:limit]
                token = _encode_token(rows[-1][2], rows[-1][3])
            return [self._doc(r) for r in rows], token

        return await self._run(op)

    async def list_active(self) -> list[Job]:
        def op() -> list[Job]:
            assert self._conn is not None
            rows = self._conn.execute(
                "SELECT doc, version FROM jobs WHERE phase NOT IN (?, ?) ORDER BY created", TERMINAL).fetchall()
            return [self._doc(r) for r in rows]

        return await self._run(op)

    def _replace(self, name: str, resource_version: str | None, mutate: Callable[[dict[str, Any]], None]) -> Job:
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
        return cast(Job, doc)

    async def update_status(self, name: str, status: JobStatus, resource_version: str) -> Job:
        new_status = copy.deepcopy(status)

        def mutate(doc: dict[str, Any]) -> None:
            doc["status"] = new_status

        doc = await self._run(self._replace, name, resource_version, mutate)
        self._notify(name)
        return doc

    async def set_annotation(self, name: str, key: str, value: str) -> Job:
        def mutate(doc: dict[str, Any]) -> None:
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
        self._notify(name)

    async def list_finished(self) -> list[Job]:
        """Every terminal job (retention looks at their completion times)."""
        def op() -> list[Job]:
            assert self._conn is not None
            rows = self._conn.execute(
                "SELECT doc, version FROM jobs WHERE phase IN (?, ?) ORDER BY created", TERMINAL).fetchall()
            return [self._doc(r) for r in rows]

        return await self._run(op)

    async def all_uids(self) -> set[str]:
        def op() -> set[str]:
            assert self._conn is not None
            return {r[0] for r in self._conn.execute("SELECT uid FROM jobs")}

        return await self._run(op)

    # -- events -------------------------------------------------------------
    async def add_event(self, new: Event) -> Event:
        event: dict[str, Any] = copy.deepcopy(dict(new))

        def op() -> Event:
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
                    return cast(Event, stored)
            event["metadata"]["resourceVersion"] = str(cur.lastrowid)
            return cast(Event, event)

        return await self._run(op)

    async def list_events(self, job: Job) -> list[Event]:
        uid = job["metadata"]["uid"]

        def op() -> list[Event]:
            assert self._conn is not None
            rows = self._conn.execute(
                "SELECT doc, seq FROM events WHERE job_uid = ? ORDER BY event_time, seq", (uid,)).fetchall()
            out = []
            for doc, seq in rows:
                ev = json.loads(doc)
                ev["metadata"]["resourceVersion"] = str(seq)
                out.append(cast(Event, ev))
            return out

        return await self._run(op)
