"""Schedules in the local store (a room of ``SQLiteJobStore``, sqlite.py): one row per
schedule, keyed by its owner and name (a user's names are their own), the document as JSON
with a version counter for conditional writes, and the runs of a schedule read from the jobs
table by their label (``SCHEDULE_LABEL``) and owner. docs/watching.md, Schedules."""

from __future__ import annotations

import copy
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar, cast

from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.store.base import SCHEDULE_LABEL, AlreadyExists, Conflict, NotFound

#: the migration that adds the table (sqlite.py's MIGRATIONS holds it in its place)
SCHEDULE_TABLES = [
    """CREATE TABLE schedules (
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        created TEXT NOT NULL,
        version INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (owner, name)
    )""",
]
T = TypeVar("T")
_SCHEDULE_OF = f"json_extract(doc, '$.metadata.labels.\"{SCHEDULE_LABEL}\"')"


def _key(owner: str | None) -> str:
    return owner or ""  # a single user's server: no owner


class ScheduleTables:
    """The schedule operations of the local store (the JobStore port's, store/base.py)."""

    _conn: sqlite3.Connection | None
    _pool: ThreadPoolExecutor
    schedules_supported = True

    async def _call(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError  # SQLiteJobStore's

    async def _sql(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def op() -> T:
            assert self._conn is not None
            return fn(self._conn)

        return await self._call(self._pool, op)

    @staticmethod
    def _schedule(row: tuple[Any, ...]) -> dict[str, Any]:
        doc = cast(dict[str, Any], json.loads(row[0]))
        doc["metadata"]["resourceVersion"] = str(row[1])
        return doc

    async def create_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        stored = copy.deepcopy(doc)
        stored["metadata"].pop("resourceVersion", None)
        name, created = stored["metadata"]["name"], stored["metadata"]["creationTimestamp"]

        def op(conn: sqlite3.Connection) -> dict[str, Any]:
            try:
                with conn:
                    conn.execute("INSERT INTO schedules (owner, name, created, version, doc) VALUES (?,?,?,1,?)",
                                 (_key(owner), name, created, json.dumps(stored)))
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"schedule {name!r} already exists") from None
            stored["metadata"]["resourceVersion"] = "1"
            return stored

        return await self._sql(op)

    async def get_schedule(self, name: str, owner: str | None) -> dict[str, Any]:
        def op(conn: sqlite3.Connection) -> dict[str, Any]:
            row = conn.execute("SELECT doc, version FROM schedules WHERE owner = ? AND name = ?",
                               (_key(owner), name)).fetchone()
            if row is None:
                raise NotFound(f"schedule {name!r} not found")
            return self._schedule(row)

        return await self._sql(op)

    async def list_schedules(self, owner: str | None, every_owner: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """(owner, schedule) pairs by name: ``owner``'s, or with ``every_owner`` all of them
        (the scheduler's loop)."""
        def op(conn: sqlite3.Connection) -> list[tuple[str, dict[str, Any]]]:
            if every_owner:
                rows = conn.execute("SELECT doc, version, owner FROM schedules ORDER BY owner, name").fetchall()
            else:
                rows = conn.execute("SELECT doc, version, owner FROM schedules WHERE owner = ? ORDER BY name",
                                    (_key(owner),)).fetchall()
            return [(r[2], self._schedule(r)) for r in rows]

        return await self._sql(op)

    async def replace_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        """Write ``doc`` if the stored one is still at its ``metadata.resourceVersion`` (else
        Conflict: another process or request wrote it first)."""
        stored = copy.deepcopy(doc)
        name = stored["metadata"]["name"]
        version = int(stored["metadata"].pop("resourceVersion"))

        def op(conn: sqlite3.Connection) -> dict[str, Any]:
            with conn:
                cur = conn.execute("UPDATE schedules SET doc = ?, version = version + 1 "
                                   "WHERE owner = ? AND name = ? AND version = ?",
                                   (json.dumps(stored), _key(owner), name, version))
                if cur.rowcount != 1:
                    found = conn.execute("SELECT 1 FROM schedules WHERE owner = ? AND name = ?",
                                         (_key(owner), name)).fetchone()
                    if found is None:
                        raise NotFound(f"schedule {name!r} not found")
                    raise Conflict(f"schedule {name!r} was modified (write based on version {version})")
            stored["metadata"]["resourceVersion"] = str(version + 1)
            return stored

        return await self._sql(op)

    async def delete_schedule(self, name: str, owner: str | None) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with conn:
                cur = conn.execute("DELETE FROM schedules WHERE owner = ? AND name = ?", (_key(owner), name))
            if cur.rowcount != 1:
                raise NotFound(f"schedule {name!r} not found")

        await self._sql(op)

    async def schedule_jobs(self, name: str, owner: str | None, limit: int | None = None) -> list[Job]:
        """The jobs schedule ``name`` of ``owner`` made, newest first (its series)."""
        sql = (f"SELECT doc, version FROM jobs WHERE {_SCHEDULE_OF} = ? AND coalesce(owner, '') = ? "
               "ORDER BY created DESC, name DESC")
        args: list[Any] = [name, _key(owner)]
        if limit:
            sql += " LIMIT ?"
            args.append(limit)

        def op(conn: sqlite3.Connection) -> list[Job]:
            out = []
            for doc, version in conn.execute(sql, args).fetchall():
                job = json.loads(doc)
                job["metadata"]["resourceVersion"] = str(version)
                out.append(cast(Job, job))
            return out

        return await self._sql(op)

