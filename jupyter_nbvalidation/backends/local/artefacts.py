"""What the local backend shows of a job and of itself: the snapshot's files, the build
log (also the one being written, found by the environment's key), health and the
store's Lease."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.backends.local.state import LocalState
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import Phase, build_enabled, parse_time


class ArtefactsRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    async def snapshot_files(self, job: Job) -> dict[str, bytes]:
        inp = self.job_dir(job) / "input"

        def read() -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for p in inp.rglob("*"):
                with contextlib.suppress(OSError):
                    if p.is_file() and not p.is_symlink():
                        out[p.relative_to(inp).as_posix()] = p.read_bytes()
            return out

        return await asyncio.to_thread(read)

    async def build_log(self, job: Job) -> str | None:
        """The build log: the one recorded at the end of Building, or during
        Building the one being written (found by the environment's key, so a
        server that does not run the build serves it too)."""
        status = job.get("status") or {}
        path = (status.get("buildStatus") or {}).get("logPath")
        if not path and status.get("phase") == Phase.BUILDING and build_enabled(job["spec"]):
            rec = self._job_build.get(job["metadata"]["uid"])
            mine = rec.log_path if rec is not None else None
            # not this process's build (or it waits for another engine's): the log being written
            if mine is not None and await asyncio.to_thread(os.path.exists, mine):
                path = mine
            else:
                path = await asyncio.to_thread(self._log_being_written, job)
        if not path:
            return None

        def read() -> str | None:
            try:
                return Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None

        return await asyncio.to_thread(read)

    def _log_being_written(self, job: Job) -> str | None:
        """The newest build log of the job's environment started since the job
        entered Building (an older one is another build's)."""
        key = self._keys.get(job["metadata"]["uid"])
        if key is None:
            if self._python_version is None:
                return None
            try:
                key = self._unplanned_env_key(job)
            except Exception:  # unreadable inputs: no build is running for them
                return None
        since = 0.0
        for t in reversed((job.get("status") or {}).get("transitions") or []):
            if t.get("phase") == Phase.BUILDING:
                entered = parse_time(t.get("time"))
                since = entered.timestamp() - 2.0 if entered else 0.0
                break
        logs = []
        for p in (self.root / "logs").glob(f"build-{key}-*.log"):
            with contextlib.suppress(OSError):
                if p.stat().st_mtime >= since:
                    logs.append(p)
        return str(max(logs, key=lambda p: p.name)) if logs else None

    async def health(self) -> dict[str, Any]:
        def check() -> tuple[bool, str]:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                probe = self.root / f".probe-{os.getpid()}"
                probe.write_text("ok")
                probe.unlink()
                return True, ""
            except OSError as e:
                return False, f"data dir not writable: {e}"

        usable, problem = await asyncio.to_thread(check)
        if self.store.problem:  # a store that cannot be read: nothing works until it is repaired
            usable, problem = False, self.store.problem
        elif self._python_version is None:
            usable, problem = False, "starting: the backend has not checked its interpreter yet"
        elif self._python_version == "unknown":
            usable, problem = False, f"the base interpreter {self.python} could not be run"
        return {
            "backend": self.name,
            "usable": usable,
            "problem": problem or None,
            "dataDir": self.data_dir,
            "python": self.python,
            "pythonVersion": self._python_version,
            "buildStrategies": ["uv", "venv"] if self.uv_path else ["venv"],
            "defaultBuildStrategy": "uv" if (self.build_tool == "auto" and self.uv_path) else
                                    ("venv" if self.build_tool == "auto" else self.build_tool),
            "activeBuilds": sum(1 for b in self._builds.values() if not b.task.done()),
            "activeValidations": sum(1 for r in self._runs.values() if not r.task.done()),
            "lease": await self.lease_state(),
            "lastGc": self.last_gc,
            "sandbox": self._sandbox,
            "bounds": self._bounds,
            "kernelPool": self._pool.state() if self._pool is not None else None,
        }

    async def lease_state(self) -> dict[str, Any]:
        """Who reconciles this data dir (the Lease as stored) and whether it is this process."""
        try:
            record = await self.store.get_lease("reconciler")
            problem = None
        except Exception as e:  # the store is not open (yet) or is locked
            record, problem = None, str(e)
        record = record or {}
        holder = record.get("holderIdentity") or None
        return {"name": "reconciler", "holderIdentity": holder, "acquireTime": record.get("acquireTime"),
                "renewTime": record.get("renewTime"), "leaseDurationSeconds": record.get("leaseDurationSeconds"),
                "leaseTransitions": record.get("leaseTransitions"), "identity": self.identity,
                "isHolder": bool(self.elector and self.elector.is_leader and holder == self.identity),
                "lastError": problem or (self.elector.last_error if self.elector else None)}
