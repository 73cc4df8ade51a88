"""A damaged SQLite store, checked and recovered (``jupyter nbvalidation store check|recover``).

:func:`check` runs ``PRAGMA integrity_check`` on the file. :func:`recover` salvages every job
and event it can still read into a new file made with the current schema, moves the damaged
file aside (``nbvalidation.db.damaged-<time>``, with its ``-wal`` and ``-shm``) and puts the new
one in its place. Rows are read by rowid: in batches while the pages read, one rowid at a time
past a damaged page, so one bad page loses only the rows it held. It refuses while another
process holds the store's lease (a server or a CLI run at work on it).

Synchronous (the CLI's, never a server's loop); standard library only.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Iterator

from jupyter_nbvalidation.store.sqlite import migrate

#: the tables salvaged (the lease and the change feed start afresh)
TABLES = ("jobs", "events", "schedules")
BATCH = 200
PROBE_PAST_DAMAGE = 20000  # rowids tried one by one past a damaged page before a table is given up


class StoreInUse(Exception):
    """Another process holds the store's lease: it must stop first."""


@dataclass
class Recovery:
    damaged_file: str
    rows: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)  # damaged spots met per table


def check(path: str) -> list[str]:
    """What ``PRAGMA integrity_check`` finds wrong with the store at ``path`` ([] when sound)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)").fetchall()]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        return [f"{type(e).__name__}: {e}"]
    return [] if rows == ["ok"] else rows


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _rows(conn: sqlite3.Connection, table: str, columns: list[str], report: Recovery) -> Iterator[tuple[object, ...]]:
    """Every row of ``table`` still readable, by rowid."""
    cols = ", ".join(f'"{c}"' for c in columns)
    batch_sql = f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED WHERE rowid > ? ORDER BY rowid LIMIT {BATCH}'
    one_sql = f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED WHERE rowid = ?'
    last = -(2 ** 63)
    while True:
        try:
            batch = conn.execute(batch_sql, (last,)).fetchall()
        except sqlite3.DatabaseError:
            report.unreadable[table] = report.unreadable.get(table, 0) + 1
            found = None
            start = max(last + 1, 1)  # rowids SQLite gives start at 1
            for rowid in range(start, start + PROBE_PAST_DAMAGE):
                try:
                    found = conn.execute(one_sql, (rowid,)).fetchone()
                except sqlite3.DatabaseError:
                    continue
                if found is not None:
                    break
            if found is None:
                return
            batch = [found]
        if not batch:
            return
        for row in batch:
            yield row[1:]
        last = int(batch[-1][0])


def _holder(conn: sqlite3.Connection) -> str | None:
    """Who holds the store's lease now (renewed within its duration), if anyone can be read."""
    try:
        rows = conn.execute("SELECT holder, renew_time, duration_seconds FROM leases").fetchall()
    except sqlite3.DatabaseError:
        return None
    now = dt.datetime.now(dt.timezone.utc)
    for holder, renewed, duration in rows:
        if not holder or not renewed:
            continue
        try:
            when = dt.datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
        except ValueError:
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        if (now - when).total_seconds() < float(duration):
            return str(holder)
    return None


def recover(path: str) -> Recovery:
    """Salvage the store at ``path`` into a new file put in its place; the damaged one is kept
    beside it. Raises StoreInUse while another process holds the lease, OSError when the files
    cannot be written."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    new_path = f"{path}.recovering"
    old = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        holder = _holder(old)
        if holder is not None:
            raise StoreInUse(f"{holder} holds the job store {path}: stop it first (a server, or a CLI run at work)")
        for stale in (new_path, new_path + "-wal", new_path + "-shm"):
            if os.path.exists(stale):
                os.remove(stale)
        report = Recovery(damaged_file=f"{path}.damaged-{stamp}")
        new = sqlite3.connect(new_path, isolation_level=None)
        try:
            migrate(new)
            for table in TABLES:
                try:
                    have = set(_columns(old, table))
                except sqlite3.DatabaseError:
                    report.unreadable[table] = report.unreadable.get(table, 0) + 1
                    continue
                columns = [c for c in _columns(new, table) if c in have]
                marks = ", ".join("?" for _ in columns)
                names = ", ".join(f'"{c}"' for c in columns)
                new.execute("BEGIN")
                count = 0
                for row in _rows(old, table, columns, report):
                    new.execute(f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({marks})', row)
                    count += 1
                new.execute("COMMIT")
                report.rows[table] = count
            new.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            new.close()
    finally:
        old.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, report.damaged_file + suffix)
    os.replace(new_path, path)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(new_path + suffix):
            os.remove(new_path + suffix)
    return report
