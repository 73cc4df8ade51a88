"""Retention of the local backend: deleting jobs, removing finished ones past
``job_ttl``, evicting least-recently-used environments over ``env_cache_max_bytes``
(never one in use), and orphaned job folders."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.backends.local.seal as seal
from jupyter_nbvalidation.backends.local.disk import ENV_MARKER, LAST_USE, RETIRED_PREFIX, _dir_bytes, isotime_of
from jupyter_nbvalidation.backends.local.state import LocalState
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import build_enabled, isotime, parse_time
from jupyter_nbvalidation.store.base import NotFound as NotFoundError


class RetentionRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    async def _gc_loop(self) -> None:
        await asyncio.sleep(min(60.0, self.gc_interval))  # not in the way of the take-over
        while True:
            try:
                self.last_gc = await self.collect()
                if self.last_gc["jobs"] or self.last_gc["envs"]:
                    self.log.info("nbvalidation: removed %d finished job(s) and %d environment(s)",
                                  len(self.last_gc["jobs"]), len(self.last_gc["envs"]))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("nbvalidation: garbage collection failed: %s", e)
            await asyncio.sleep(self.gc_interval)

    async def delete_job(self, job: Job) -> None:
        """Remove a finished job: its record and events, then its folder
        (snapshot, runs, executed notebook)."""
        await self.store.delete(job["metadata"]["name"])
        await self.cleanup(job)
        await asyncio.to_thread(shutil.rmtree, self.job_dir(job), True)

    async def _keys_in_use(self) -> set[str]:
        """Environments a job that has not finished uses or will use."""
        keys = {b.key for b in self._builds.values() if not b.task.done()}
        active = await self.store.list_active()
        if self._python_version is None and any(build_enabled(j["spec"]) for j in active):
            await self._check_python()

        def compute() -> set[str]:
            out: set[str] = set()
            for job in active:
                ref = ((job.get("status") or {}).get("buildStatus") or {}).get("imageReference")
                if ref:
                    out.add(Path(ref).name)
                if build_enabled(job["spec"]):
                    key = self._keys.get(job["metadata"]["uid"])
                    if key is None:  # a job this process has not planned (yet): its environment from its snapshot
                        try:
                            key = self._unplanned_env_key(job)
                        except Exception:  # unreadable inputs: that job cannot reuse a cached environment
                            continue
                    out.add(key)
            return out

        return keys | await asyncio.to_thread(compute)

    def _env_entries(self) -> list[dict[str, Any]]:
        envs = self.root / "envs"
        out: list[dict[str, Any]] = []
        if not envs.is_dir():
            return out
        for d in envs.iterdir():
            if d.name.startswith(".") or not d.is_dir() or not (d / ENV_MARKER).is_file():
                continue
            try:
                last = max((d / f).stat().st_mtime for f in (LAST_USE, ENV_MARKER) if (d / f).exists())
            except (OSError, ValueError):
                continue
            out.append({"key": d.name, "bytes": _dir_bytes(d), "lastUseEpoch": last})
        return out

    def _evict(self, key: str) -> None:
        """Out of sight first (one rename, so nothing half-removed is ever used), then removed."""
        gone = self.root / "envs" / f".evict-{key}-{uuid.uuid4().hex[:8]}"
        os.rename(self.env_dir(key), gone)
        shutil.rmtree(gone, ignore_errors=True)

    def _sweep_orphan_job_dirs(self, uids: set[str], older_than: float = 3600.0) -> list[str]:
        """Job folders without a job (a crash between a delete's two steps); young
        ones are left alone (a submit writes its folder before its record); ``.pool`` is
        the pre-started kernels' (pool.py), beside the run folders, on their filesystem."""
        jobs = self.root / "jobs"
        removed: list[str] = []
        if not jobs.is_dir():
            return removed
        for d in jobs.iterdir():
            with contextlib.suppress(OSError):
                if d.is_dir() and d.name not in uids and not d.name.startswith(".") and time.time() - d.stat().st_mtime > older_than:
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d.name)
        for d in (self.root / "envs").glob(".evict-*") if (self.root / "envs").is_dir() else ():
            shutil.rmtree(d, ignore_errors=True)
        return removed

    def _remove_retired_envs(self) -> None:
        envs = self.root / "envs"
        for d in envs.glob(f"{RETIRED_PREFIX}*") if envs.is_dir() else ():
            shutil.rmtree(d, ignore_errors=True)

    async def collect(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict[str, Any]:
        """Retention (finished jobs older than ``job_ttl``) and the environment
        cache cap (least recently used first, never one in use); returns what
        was removed."""
        ttl = self.job_ttl if job_ttl is None else job_ttl
        cap = self.env_cache_max_bytes if env_cache_max_bytes is None else env_cache_max_bytes
        report: dict[str, Any] = {"jobs": [], "orphanDirs": [], "envs": [], "jobTtlSeconds": ttl,
                                  "envCacheMaxBytes": cap, "time": isotime()}
        if ttl and ttl > 0:
            cutoff = time.time() - ttl
            for job in await self.store.list_finished():
                st = job.get("status") or {}
                finished = parse_time(st.get("completionTime"))
                if finished is not None and finished.timestamp() < cutoff:
                    try:
                        await self.delete_job(job)
                    except NotFoundError:
                        continue  # deleted meanwhile
                    report["jobs"].append({"name": job["metadata"]["name"], "completionTime": st["completionTime"]})
        finished_jobs = await self.store.list_finished()  # copies an engine could not remove at the end

        def sweep_copies() -> None:
            for job in finished_jobs:
                self._remove_copies(job)

        await asyncio.to_thread(sweep_copies)
        uids = await self.store.all_uids()
        report["orphanDirs"] = await asyncio.to_thread(self._sweep_orphan_job_dirs, uids)
        await asyncio.to_thread(seal.sweep, self.root / "envs")  # the seals of environments gone (seal.py)
        if not await self.store.list_active():  # no kernel can still run in a retired environment
            await asyncio.to_thread(self._remove_retired_envs)
        entries = await asyncio.to_thread(self._env_entries)
        total = sum(e["bytes"] for e in entries)
        if cap and cap > 0 and total > cap:
            in_use = await self._keys_in_use()
            now = time.time()
            for e in sorted(entries, key=lambda e: e["lastUseEpoch"]):
                if total <= cap:
                    break
                if e["key"] in in_use or now - e["lastUseEpoch"] < self.env_min_idle:
                    continue
                try:
                    await asyncio.to_thread(self._evict, e["key"])
                except OSError:
                    continue
                total -= e["bytes"]
                report["envs"].append({"key": e["key"], "bytes": e["bytes"],
                                       "lastUse": isotime_of(e["lastUseEpoch"])})
        report["envCacheBytes"] = total
        await self.collect_more(report)
        return report
