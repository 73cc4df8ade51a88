"""Pre-started kernels of the local backend (issue 43; docs/kernel.md, "Pre-started
kernels"): a validation whose kernel is already running when it starts.

A *slot* is a runner started in ``--pool-slot`` mode (runner/pool.py) in a folder of its
own, ``<data dir>/jobs/.pool/slot-<id>/`` (beside the run folders, on their filesystem): its
kernel runs in a fresh sandbox (its own mount, PID, IPC and network namespaces, the same hidden
and shown paths as a run's), whose written folders are the slot's empty ``tree`` (the kernel's
working folder) and its ``scratch`` (its /tmp and /var/tmp). Nothing of a notebook has run in it.

A slot serves only a run that asks exactly what it was started with, its *key*: the
interpreter, the sandbox's hidden and shown paths and network, the bounds (memory limit,
disk budget) and the kernel's environment (``podConfig.env``; the locale and ``TZ`` are
the server's, the same for every runner). A run that takes one (runs.py) places its copy
of the notebook's folder into the slot's ``tree`` (its run folder's ``tree`` and
``scratch`` are links to the slot's), and hands the runner its arguments: the runner binds
the kernel to the copy (working directory) before any cell runs, then runs the notebook as
a runner does. A slot is used once and never returned; taking one starts its successor
(``size`` per key, at most ``max_total`` slots in all). A key not used for ``idle_ttl``
seconds has no slot: nothing is held when the server is idle. The key used last
(``recent.json``, within ``idle_ttl``) is warmed again when a server or CLI engine starts leading.

A slot's runner ends, and stops its kernel, when the pool discards it (its stdin is
closed), when this process ends (the same), or when its kernel dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import jupyter_nbvalidation.backends.workcopy as workcopy
import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.backends.local.disk import (
    _read_json,
    _write_json_atomic,
    owner_alive,
    process_record,
    same_process_alive,
)
from jupyter_nbvalidation.core.priority import deprioritize
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within
from jupyter_nbvalidation.runner.environment import runner_environment
from jupyter_nbvalidation.runner.pool import BOUND, PREFIX, READY

SLOT_COMMAND = [sys.executable, "-m", "jupyter_nbvalidation.runner", "--pool-slot"]
READY_TIMEOUT = 120.0  # a kernel that takes longer to start is no slot
BIND_TIMEOUT = 15.0  # the runner answers a run's line at once: longer is a fault, and the run starts cold
RECENT = "recent.json"


@dataclass
class SlotSpec:
    """What a slot's kernel is started with: exactly what a run asks of its kernel's start."""

    python: str
    sandbox: dict[str, Any] | None  # hide, show, network (write and scratch: the slot's own)
    bounds: dict[str, Any] | None  # memory, disk (its paths: the slot's own)
    kernel_env: dict[str, str]

    @property
    def key(self) -> str:
        return json.dumps([self.python, self.sandbox, self.bounds, self.kernel_env], sort_keys=True)

    def as_json(self) -> dict[str, Any]:
        return {"python": self.python, "sandbox": self.sandbox, "bounds": self.bounds, "kernelEnv": self.kernel_env}

    @classmethod
    def of(cls, python: str, sandbox: Mapping[str, Any] | None, bounds: Mapping[str, Any] | None,
           kernel_env: Mapping[str, str]) -> SlotSpec:
        """The spec of a run's kernel, from its runner's sandbox and bounds documents."""
        box = None if sandbox is None else {k: v for k, v in sandbox.items() if k not in ("write", "scratch")}
        limits = None
        if bounds:
            limits = {k: dict(v) for k, v in bounds.items()}
            if "disk" in limits:
                limits["disk"].pop("paths", None)
        return cls(python, box, limits, dict(kernel_env))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SlotSpec:
        return cls(str(doc["python"]), doc.get("sandbox"), doc.get("bounds"), dict(doc.get("kernelEnv") or {}))


@dataclass
class Slot:
    spec: SlotSpec
    folder: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: asyncio.subprocess.Process | None = None
    ready: asyncio.Future[str | None] | None = None  # None: ready; a str: why it is not
    watcher: asyncio.Task[None] | None = None
    starter: asyncio.Task[None] | None = None
    stamp: str = ""  # its environment as it was when the slot started (KernelPool.stamp)

    @property
    def tree(self) -> Path:
        return self.folder / workcopy.TREE


class KernelPool:
    """The slots of one backend, by key (see the module)."""

    def __init__(self, root: Path, *, size: int, max_total: int, idle_ttl: float, niceness: int,
                 niced: Callable[[list[str]], list[str]], owner: Callable[[], dict[str, Any]],
                 log: logging.Logger, stamp: Callable[[str], str] = lambda python: "",
                 expected: int | None = None) -> None:
        self.root = root
        # the runs this engine will ask a kernel for in all, where known (a CLI engine's): a slot
        # is started only while more runs are to come than slots are held
        self.expected = expected
        # which build of an interpreter's environment this is (blocking): a slot started in an
        # environment since retired and rebuilt at the same place serves no run
        self.stamp = stamp
        self.size, self.max_total, self.idle_ttl = size, max_total, idle_ttl
        self.niceness, self._niced, self._owner, self.log = niceness, niced, owner, log
        self._slots: dict[str, list[Slot]] = {}
        self._last_use: dict[str, float] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._starting: set[asyncio.Task[None]] = set()
        self.started = self.taken = self.missed = 0  # for /health and the benchmark
        self.asked = 0  # take() calls: the runs that asked for a kernel so far

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.max_total > 0

    def count(self) -> int:
        return sum(len(v) for v in self._slots.values())

    # -- keeping slots -------------------------------------------------------------

    def want(self, spec: SlotSpec, *, used: bool = True) -> None:
        """Keep ``size`` slots of this key (within ``max_total``); the key counts as used now."""
        if not self.enabled:
            return
        key = spec.key
        if used:
            self._last_use[key] = time.time()
            with contextlib.suppress(OSError):
                self._remember(spec)
        handle = self._expiry.pop(key, None)
        if handle is not None:
            handle.cancel()
        if self.idle_ttl > 0:
            left = self.idle_ttl - (time.time() - self._last_use.get(key, time.time()))
            self._expiry[key] = asyncio.get_running_loop().call_later(max(left, 0.0), self._expire, key)
        slots = self._slots.setdefault(key, [])
        while len(slots) < self.size and self.count() < self.max_total and \
                (self.expected is None or self.count() + self.asked < self.expected):
            slot = Slot(spec, self.root / f"slot-{uuid.uuid4().hex[:12]}")
            slot.ready = asyncio.get_running_loop().create_future()
            slots.append(slot)
            task = slot.starter = asyncio.get_running_loop().create_task(self._start(slot),
                                                                         name="nbvalidation-pool-slot")
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    def _expire(self, key: str) -> None:
        """Not used for idle_ttl: its slots go."""
        self._expiry.pop(key, None)
        for slot in self._slots.pop(key, []):
            self.discard(slot)

    async def _start(self, slot: Slot) -> None:
        assert slot.ready is not None
        try:
            slot.stamp = await asyncio.to_thread(self.stamp, slot.spec.python)
            await asyncio.to_thread(self._make_folder, slot)
            env = runner_environment(str(slot.folder / "runner"), slot.run_id)
            with open(slot.folder / "pool.log", "wb") as log:
                slot.proc = await asyncio.create_subprocess_exec(
                    *self._niced([*SLOT_COMMAND, str(slot.folder / "slot.json")]), stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=log.fileno(), start_new_session=True, env=env)
            deprioritize(slot.proc.pid, self.niceness)
            self.started += 1
            await asyncio.to_thread(_write_json_atomic, slot.folder / "owner.json",
                                    {**self._owner(), "runner": process_record(slot.proc.pid)})
            assert slot.proc.stdout is not None
            line = await wait_within(slot.proc.stdout.readline(), READY_TIMEOUT)
            said = line.decode("utf-8", "replace").strip()
            if said != PREFIX + READY:
                raise RuntimeError(said.removeprefix(PREFIX) or "its runner ended before its kernel was ready")
        except asyncio.CancelledError:
            if not slot.ready.done():
                slot.ready.set_result("cancelled")
            self._forget(slot)
            raise
        except Exception as e:
            self.log.warning("nbvalidation: a pre-started kernel for %s could not start: %s", slot.spec.python, e)
            slot.ready.set_result(str(e) or type(e).__name__)
            self._forget(slot)
            return
        slot.ready.set_result(None)
        slot.watcher = asyncio.get_running_loop().create_task(self._watch(slot))

    def _make_folder(self, slot: Slot) -> None:
        """The slot's folder: its empty tree, scratch folders, and the runner's slot file."""
        slot.tree.mkdir(parents=True)
        doc = slot.spec.as_json()
        doc["cwd"] = str(slot.tree)
        if slot.spec.sandbox is not None:
            doc["sandbox"] = {**slot.spec.sandbox, "write": [str(slot.tree)], "scratch": workcopy.make_scratch(slot.folder)}
        if slot.spec.bounds and "disk" in slot.spec.bounds:
            doc["bounds"] = {**slot.spec.bounds, "disk": {**slot.spec.bounds["disk"], "paths": [
                str(slot.tree), str(slot.folder / workcopy.SCRATCH)]}}
        (slot.folder / "slot.json").write_text(json.dumps(doc), encoding="utf-8")

    async def _watch(self, slot: Slot) -> None:
        """A ready slot whose runner ends (its kernel died) is no slot."""
        assert slot.proc is not None
        await slot.proc.wait()
        if self._forget(slot):
            self.log.warning("nbvalidation: a pre-started kernel ended before it was used (%s)",
                             slot.folder / "pool.log")
            await asyncio.to_thread(self._remove, slot)

    def _forget(self, slot: Slot) -> bool:
        slots = self._slots.get(slot.spec.key, [])
        if slot in slots:
            slots.remove(slot)
            return True
        return False

    def discard(self, slot: Slot) -> None:
        """A slot not used: its runner stops its kernel when its stdin closes."""
        self._forget(slot)
        if slot.watcher is not None:
            slot.watcher.cancel()
        task = asyncio.get_running_loop().create_task(self._end(slot))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _end(self, slot: Slot) -> None:
        """A ready slot's runner stops its kernel (its stdin closed); one still starting is killed."""
        ready = slot.ready is not None and slot.ready.done() and slot.ready.result() is None
        if slot.starter is not None and not slot.starter.done():
            await cancel_and_wait(slot.starter)
        proc = slot.proc
        if proc is not None and proc.returncode is None:
            if ready and proc.stdin is not None:
                proc.stdin.close()
                try:
                    await wait_within(proc.wait(), 20)
                except asyncio.TimeoutError:
                    hygiene.kill_group(proc.pid, 9)
            else:
                hygiene.kill_group(proc.pid, 9)
            await proc.wait()
        await asyncio.to_thread(self._remove, slot)

    def _remove(self, slot: Slot) -> None:
        hygiene.kill_all(slot.run_id)
        shutil.rmtree(slot.folder, ignore_errors=True)

    # -- a run takes one -------------------------------------------------------------

    async def take(self, spec: SlotSpec) -> Slot | None:
        """A slot of this key for a run (ready, else still starting and awaited), or None;
        its successor is started either way."""
        if not self.enabled:
            return None
        self.asked += 1
        slots = self._slots.get(spec.key, [])
        ready = [s for s in slots if s.ready is not None and s.ready.done() and s.ready.result() is None]
        slot = ready[0] if ready else (slots[0] if slots else None)
        if slot is not None:
            self._forget(slot)
        self.want(spec)
        if slot is None:
            self.missed += 1
            return None
        assert slot.ready is not None
        try:
            if not slot.ready.done():
                await asyncio.wait([slot.ready], timeout=READY_TIMEOUT)
            if not slot.ready.done() or slot.ready.result() is not None or slot.proc is None \
                    or slot.proc.returncode is not None or slot.stamp != await asyncio.to_thread(self.stamp, spec.python):
                self.missed += 1
                self.discard(slot)
                return None
            if slot.watcher is not None:
                await cancel_and_wait(slot.watcher)
        except asyncio.CancelledError:  # the run was cancelled (or its engine stopped) while it waited:
            self.discard(slot)  # the slot is no longer among the kept ones, so nothing else would stop it
            raise
        self.taken += 1
        return slot

    async def bind(self, slot: Slot, argv: list[str], cwd: str, log_path: str) -> bool:
        """The run's line to the slot's runner (see runner/pool.py); True once it says the
        kernel is bound. False: the slot is discarded, the run starts its own kernel."""
        proc = slot.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        line = json.dumps({"argv": argv, "cwd": cwd, "log": log_path}) + "\n"
        try:
            proc.stdin.write(line.encode("utf-8"))
            await wait_within(proc.stdin.drain(), BIND_TIMEOUT)
            said = await wait_within(proc.stdout.readline(), BIND_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as e:
            said = f"{type(e).__name__} {e}".encode()
        if said.decode("utf-8", "replace").strip() == PREFIX + BOUND:
            proc.stdin.close()  # it reads nothing more; its stdout now goes to the run's log
            return True
        self.log.warning("nbvalidation: a pre-started kernel could not be bound (%s); the run starts its own",
                         said.decode("utf-8", "replace").strip())
        self.discard(slot)
        return False

    def place(self, slot: Slot, run_dir: Path, prepare: Callable[[Path], str]) -> None:
        """Blocks: the run's copy made (``prepare(folder)``: workcopy.prepare into a folder of
        the slot) and moved into the folder the kernel started in; the run folder's ``tree``
        and ``scratch`` link to the slot's (workcopy.remove removes them with the slot)."""
        stage = slot.folder / "stage"
        prepare(stage)
        staged = stage / workcopy.TREE
        for entry in os.listdir(staged):
            os.rename(staged / entry, slot.tree / entry)
        os.rmdir(staged)
        shutil.rmtree(stage, ignore_errors=True)
        (run_dir / workcopy.POOLED).write_text(str(slot.folder), encoding="utf-8")
        os.symlink(slot.tree, run_dir / workcopy.TREE)
        if (slot.folder / workcopy.SCRATCH).exists():
            os.symlink(slot.folder / workcopy.SCRATCH, run_dir / workcopy.SCRATCH)

    # -- start and stop ---------------------------------------------------------------

    def _remember(self, spec: SlotSpec) -> None:
        """The key in recent.json, with when it was used (blocking, but small and rare)."""
        self.root.mkdir(parents=True, exist_ok=True)
        recent = _read_json(self.root / RECENT) or {}
        now = time.time()
        recent = {k: v for k, v in recent.items() if isinstance(v, dict) and now - float(v.get("used", 0)) < self.idle_ttl}
        recent[spec.key] = {"used": now, "spec": spec.as_json()}
        _write_json_atomic(self.root / RECENT, recent)

    async def start(self) -> None:
        """Slots left by an engine that is gone, removed; the key used last (within idle_ttl), warmed."""
        if not self.enabled:
            return
        recent = await asyncio.to_thread(self._sweep)
        now = time.time()
        # the key used last only: a CLI engine lives for one command, and a kernel started for
        # another key would only take CPU from its run
        for entry in sorted(recent.values(), key=lambda v: -float(v.get("used", 0)))[:1]:
            try:
                spec = SlotSpec.from_json(entry["spec"])
            except (KeyError, TypeError):
                continue
            if now - float(entry.get("used", 0)) < self.idle_ttl and os.path.exists(spec.python):
                self._last_use[spec.key] = float(entry["used"])
                self.want(spec, used=False)

    def _sweep(self) -> dict[str, Any]:
        if self.root.is_dir():
            for folder in self.root.glob("slot-*"):
                owner = _read_json(folder / "owner.json")
                if not owner_alive(owner) and not same_process_alive((owner or {}).get("runner")):
                    shutil.rmtree(folder, ignore_errors=True)
        return _read_json(self.root / RECENT) or {}

    async def stop(self) -> None:
        """Every slot discarded (their kernels stopped), nothing left."""
        for handle in self._expiry.values():
            handle.cancel()
        self._expiry.clear()
        for key in list(self._slots):
            for slot in self._slots.pop(key):
                self.discard(slot)
        while self._starting:
            await asyncio.wait(set(self._starting))

    def state(self) -> dict[str, Any]:
        """For /health: what is held now."""
        ready = sum(1 for v in self._slots.values() for s in v
                    if s.ready is not None and s.ready.done() and s.ready.result() is None)
        return {"size": self.size, "max": self.max_total, "idleTtl": self.idle_ttl, "slots": self.count(), "ready": ready,
                "keys": len(self._slots), "started": self.started, "taken": self.taken, "missed": self.missed,
                "expected": self.expected}
