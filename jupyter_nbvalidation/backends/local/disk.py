"""The local backend's on-disk state, shared by its rooms: the layout's names, who
started a process (an owner record names it by pid *and* start time, so a reused
pid is never mistaken for it), JSON files written atomically, a build's and a
run's in-memory records, and how a finished run's files become an Observation."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, cast

import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.verdict.cache as verdict_cache
from jupyter_nbvalidation.backends.base import FAILED, SUCCEEDED, Notice, Observation
from jupyter_nbvalidation.backends.local.faults import fault_of_result
from jupyter_nbvalidation.backends.local.forkserver import ForkedRunner
from jupyter_nbvalidation.core.documents import Progress, RunnerResult
from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.runner.protocol import ProgressReader

RUNNER_COMMAND = [sys.executable, "-m", "jupyter_nbvalidation.runner"]
ENV_MARKER = ".nbvalidation-env.json"
LAST_USE = ".last-use"
RETIRED_PREFIX = ".retired-"  # an environment changed since its build, out of sight (environments.py)
RECORD_FILE = "environment.json"  # environment_record.py: in a built environment, and per job
ADOPT_POLL = 0.5  # seconds between looks at a run or build another engine started
PROGRESS_POLL = 0.5  # seconds between reads of a running runner's log (its progress records)
PROGRESS_NOTIFY = 1.0  # at most one engine wake-up a second for progress (the engine throttles writes too)


HOST = socket.gethostname()


proc_start = hygiene.live_start_time  # (pid, start time) names one process, whatever reuses the pid later


def process_record(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": proc_start(pid)}


def same_process_alive(rec: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether the process a record names is still running (same pid, same start)."""
    if not rec or not isinstance(rec.get("pid"), int):
        return False
    start = proc_start(rec["pid"])
    return start is not None and start == rec.get("start")


def owner_alive(owner: dict[str, Any] | None) -> bool:
    """Whether the engine named by an owner record may still act: provably dead
    only when it ran on this host and its (pid, start time) is gone."""
    if not owner:
        return False
    if owner.get("host") not in (None, HOST):
        return True  # another machine's process: never assumed dead
    return same_process_alive(owner)


def _write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def isotime_of(epoch: float) -> str:

    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total



@dataclass
class _Build:
    key: str
    task: asyncio.Task[Observation]
    log_path: str
    waiters: set[str] = field(default_factory=set)
    proc: asyncio.subprocess.Process | None = None
    pid_file: Path | None = None


@dataclass
class _Run:
    task: asyncio.Task[Observation]
    run_dir: Path
    proc: asyncio.subprocess.Process | ForkedRunner | None = None
    started_at: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # marks every process of the run
    name: str = ""
    adopted: bool = False  # a run another engine started: watched, never killed while its owner lives
    progress: ProgressReader = field(default_factory=ProgressReader)  # from the runner's log, as it grows
    progress_offset: int = 0
    attempt: int = 0  # model.validation_attempt of the job it runs: a retry gets a new run
    notices: list[Notice] = field(default_factory=list)  # said of the run (its environment rebuilt)


async def _terminate(proc: asyncio.subprocess.Process | ForkedRunner, run_id: str | None = None, grace: float = 5.0) -> None:
    """SIGTERM the process group (the runner then shuts its kernel down and
    writes what it has), SIGKILL after ``grace`` seconds; then every process
    still marked with the run's ``run_id`` (what a killed runner left)."""
    if proc.returncode is None:
        hygiene.kill_group(proc.pid, signal.SIGTERM)
        try:
            await wait_within(asyncio.shield(proc.wait()), grace)
        except asyncio.TimeoutError:
            hygiene.kill_group(proc.pid, signal.SIGKILL)
    if run_id:
        await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run_id))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc: dict[str, Any] | None = json.load(f)  # the files this backend writes: objects
            return doc
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            content = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(content[-lines:])[-800:]


def _progress_of(run: _Run) -> Progress | None:
    """The run's progress for ``Observation.progress`` (``status.progress`` without
    ``updatedAt``), when its runner has reported any."""
    return cast("Progress | None", run.progress.snapshot())


def _attempt_of(run_dir: Path) -> int:
    """The attempt a run folder was made for (its ``attempt`` file; none: the first)."""
    try:
        return int((run_dir / "attempt").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _observation_from_result(result: dict[str, Any], started: str | None, finished: str | None,
                             reference: str | None, run_dir: Path) -> Observation:
    ok = result.get("verdict") == Phase.SUCCEEDED
    # a failure that is not the notebook's (local_faults): the engine retries it or ends the job
    # InfrastructureFailed, never a notebook verdict
    fault = None if ok else fault_of_result(result, run_dir)
    # result.json: the runner's result document (runner/protocol.py writes it)
    return Observation(SUCCEEDED if ok else FAILED, message=result.get("message", ""),
                       result=cast(RunnerResult, result), started_at=started, finished_at=finished,
                       reference=reference, fault=fault)


def folder_refusal(folder: str, e: verdict_cache.FolderTooLarge, max_files: int, max_bytes: int) -> str:
    """Why a notebook's folder is too large to be copied for its kernel."""
    what = (f"over {max_files} files" if e.files > max_files
            else f"over {max_bytes} bytes ({e.files} files hold {e.nbytes} bytes already)")
    trait = "c.LocalBackend.max_folder_files" if e.files > max_files else "c.LocalBackend.max_folder_bytes"
    return (f"spec.notebook.path: the notebook's folder {folder} holds {what}; the kernel works in a copy of it, "
            f"bounded by {trait} (raise it, or name the files the notebook reads in spec.inputFiles)")
