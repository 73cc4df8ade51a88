"""The run's bounds, on the runner's side: a memory limit and a disk budget.

The runner's ``--bounds FILE.json`` (the local backend writes it)::

    {"memory": {"bytes": N, "text": "512Mi", "field": "podConfig.resources.limits.memory",
                "method": "auto" | "cgroup" | "rlimit"},
     "disk": {"bytes": N, "text": "2 GiB", "field": "LocalBackend.run_disk_limit",
              "paths": [folders the run writes: its working copy, its scratch folders]}}

**Memory.** A memory cgroup of its own for the kernel (``method`` auto: the first that
works here): a child of the runner's own cgroup, cgroup v2 where the runner's cgroup
delegates the memory controller to its children, else the cgroup v1 memory hierarchy
where the runner may make one (root, or a delegated folder); the kernel's launcher
joins it before the kernel starts (:mod:`.bounds`), so the kernel and everything it
starts count, page cache and ``/dev/shm`` included, and past the limit the cgroup's
out-of-memory killer stops a process of it (the kernel, its largest). Where no cgroup
can be made: ``RLIMIT_AS``, per process and of its address space (more than what it
uses: the limit plus RLIMIT_AS_HEADROOM, glibc's malloc arenas capped at 2), an
allocation past it failing with ``MemoryError``: coarse, and per process.

**Disk.** What the run writes to its folders (the working copy, its /tmp and
/var/tmp scratch folders, the kernel's HOME and TMPDIR in the runner's temporary
folder) is measured every ``WATCH_INTERVAL`` s (allocated blocks, as ``du``; a hard
link once), against what they held when the kernel started, plus what the sandbox's
private ``/dev/shm`` holds (a tmpfs of the budget's size, read through the
launcher's ``/proc/<pid>/root``). Past the budget the kernel is stopped. No single
file grows past the budget (``RLIMIT_FSIZE``), so one write cannot overshoot; many
files written between two looks can, by what the disk takes in ``WATCH_INTERVAL``.

Past either, the verdict is Failed with a reason naming the limit (``OOMKilled``,
``DiskLimitExceeded``), whatever the cell then reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import sys
import time
from typing import Any, Awaitable, Callable, Mapping

from jupyter_nbvalidation.core.vocabulary import ResultReason

WATCH_INTERVAL = 0.5  # seconds between two measures of the run's folders
WATCH_SHARE = 0.1  # at most this share of a core for them: a slow walk waits longer
CGROUP_PREFIX = "nbvalidation-"
STALE_CGROUP = 600.0  # an empty run cgroup this old (seconds) is a dead runner's: removed
CGROUP_ROOT = "/sys/fs/cgroup"
# RLIMIT_AS counts address space a process reserves and never uses: an idle kernel reserves about
# 210 MiB (its threads' stacks, glibc's malloc arenas, capped at 2 by bounds.py), on top of the limit
RLIMIT_AS_HEADROOM = 256 * 2**20
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bounds.py")


def fmt_bytes(n: int) -> str:
    """``2 GiB``, ``100 MiB``, or the bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def memory_text(text: str, field: str) -> str:
    return f"the kernel used more than the memory limit of {text} ({field})"


def disk_text(text: str, field: str) -> str:
    return f"the run wrote more than its disk budget of {text} ({field})"


# --- memory: a cgroup of the run's own -------------------------------------------


def _own_cgroups(root: str) -> tuple[str | None, str | None]:
    """(v2 folder, v1 memory folder) of this process's cgroups, when mounted at ``root``."""
    v2 = v1 = None
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        num, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if num == "0" and controllers == "" and os.path.isfile(os.path.join(root, "cgroup.controllers")):
            v2 = os.path.join(root, path.lstrip("/"))
        elif "memory" in controllers.split(","):
            v1 = os.path.join(root, "memory", path.lstrip("/"))
    return v2, v1


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def _sweep(parent: str) -> None:
    """Empty run cgroups of runners long gone (a runner that was killed leaves its own)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            path = os.path.join(parent, name)
            if name.startswith(CGROUP_PREFIX):
                with contextlib.suppress(OSError):
                    if time.time() - os.stat(path).st_mtime > STALE_CGROUP:
                        os.rmdir(path)  # EBUSY while a process is in it: left


def make_cgroup(run_id: str, limit: int, root: str = CGROUP_ROOT) -> tuple[str, str]:
    """A memory cgroup for the run, its limit set: (folder, "cgroup v2" | "cgroup v1").
    OSError when none can be made here."""
    v2, v1 = _own_cgroups(root)
    tried: list[str] = []
    if v2 is not None and "memory" in _read(os.path.join(v2, "cgroup.subtree_control")).split():
        folder = os.path.join(v2, CGROUP_PREFIX + run_id)
        try:
            _sweep(v2)
            os.mkdir(folder)
            _write(os.path.join(folder, "memory.max"), str(limit))
            if os.path.exists(os.path.join(folder, "memory.swap.max")):
                _write(os.path.join(folder, "memory.swap.max"), "0")
            return folder, "cgroup v2"
        except OSError as e:
            remove_cgroup(folder)
            tried.append(f"cgroup v2 {v2}: {e.strerror or e}")
    if v1 is not None and os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
        folder = os.path.join(v1, CGROUP_PREFIX + run_id)
        try:
            _sweep(v1)
            os.mkdir(folder)
            _write(os.path.join(folder, "memory.limit_in_bytes"), str(limit))
            if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):  # no escape to swap
                with contextlib.suppress(OSError):
                    _write(os.path.join(folder, "memory.memsw.limit_in_bytes"), str(limit))
            return folder, "cgroup v1"
        except OSError as e:
            remove_cgroup(folder)
            tried.append(f"cgroup v1 {v1}: {e.strerror or e}")
    raise OSError(errno.ENOTSUP, "; ".join(tried) or "no memory cgroup of this process")


def detect(root: str = CGROUP_ROOT) -> dict[str, Any]:
    """How a job's memory limit is held here (blocks: a cgroup is made and removed):
    ``{"memory": "cgroup v2" | "cgroup v1" | "RLIMIT_AS", "reason": why no cgroup, or None}``."""
    try:
        folder, method = make_cgroup(f"probe-{os.getpid()}-{time.monotonic_ns()}", 2**30, root)
    except OSError as e:
        return {"memory": "RLIMIT_AS", "reason": f"no memory cgroup can be made here ({e.strerror or e})"}
    remove_cgroup(folder)
    return {"memory": method, "reason": None}


def oom_kills(folder: str) -> int:
    """How many processes the cgroup's out-of-memory killer stopped."""
    for name in ("memory.events", "memory.oom_control"):
        for line in _read(os.path.join(folder, name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return 0


def remove_cgroup(folder: str) -> None:
    """The run's cgroup, gone (what is still in it killed first: the run has ended)."""
    if not os.path.isdir(folder):
        return
    for _ in range(50):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            for pid in _read(os.path.join(folder, "cgroup.procs")).split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
            time.sleep(0.02)


# --- disk: what the run's folders hold -----------------------------------------------


def folder_bytes(paths: list[str]) -> int:
    """The blocks allocated under ``paths`` (links not followed, a hard link once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in paths:
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (".", *dirnames, *filenames):
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, name))
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
    return total


def tmpfs_bytes(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class RunBounds:
    """One run's bounds (``--bounds``): made before the kernel starts, watched while it runs,
    judged when it has ended (``outcome``), released at the end."""

    def __init__(self, doc: Mapping[str, Any], run_id: str) -> None:
        self.run_id = run_id
        memory, disk = doc.get("memory") or {}, doc.get("disk") or {}
        self.memory = int(memory.get("bytes") or 0)
        self.memory_text = str(memory.get("text") or fmt_bytes(self.memory))
        self.memory_field = str(memory.get("field") or "memory limit")
        self.method = str(memory.get("method") or "auto")
        self.disk = int(disk.get("bytes") or 0)
        self.disk_text = str(disk.get("text") or fmt_bytes(self.disk))
        self.disk_field = str(disk.get("field") or "disk budget")
        self.paths = [str(p) for p in disk.get("paths") or []]
        self.cgroup: str | None = None
        self.memory_used = ""  # how the memory limit is held: "cgroup v1", "cgroup v2", "RLIMIT_AS"
        self.shm: str | None = None  # the sandbox's /dev/shm, as the runner reaches it
        self.baseline = 0
        self.written = 0  # the most the run's writes were seen to take, in bytes
        self.exceeded = False
        self._task: asyncio.Task[None] | None = None

    # before the kernel ---------------------------------------------------------

    def prepare(self, temp_dir: str, sandboxed: bool) -> dict[str, Any]:
        """Blocks (call it in a thread): the cgroup made, the folders' start measured;
        the launcher's part (:mod:`.bounds`' config)."""
        conf: dict[str, Any] = {}
        if self.memory > 0:
            if self.method in ("auto", "cgroup"):
                try:
                    self.cgroup, self.memory_used = make_cgroup(self.run_id, self.memory)
                    conf["cgroup"] = self.cgroup
                except OSError:
                    if self.method == "cgroup":
                        raise
            if self.cgroup is None:
                self.memory_used = "RLIMIT_AS"
                conf["rlimitAs"] = self.memory + RLIMIT_AS_HEADROOM
        if self.disk > 0:
            self.paths.append(temp_dir)  # the kernel's HOME, TMPDIR and its other folders
            self.baseline = folder_bytes(self.paths)
            conf["fsize"] = self.disk + 1  # a file of the budget is allowed, one byte more is not
            if sandboxed:
                conf["shm"] = self.disk
        return conf

    @staticmethod
    def wrap(argv: list[str], config_file: str) -> list[str]:
        """The kernel's command run by :mod:`.bounds` (where no sandbox launcher applies them)."""
        return [sys.executable, "-I", "-S", LAUNCHER, config_file, "--", *argv]

    # while it runs ------------------------------------------------------------

    def measure(self) -> int:
        """Blocks: what the run has written so far (bytes), and whether it is past the budget."""
        used = max(0, folder_bytes(self.paths) - self.baseline)
        if self.shm is not None:
            used += tmpfs_bytes(self.shm)
        self.written = max(self.written, used)
        if self.disk > 0 and used >= self.disk:
            self.exceeded = True
        return used

    def watch(self, launcher_pid: int | None, sandboxed: bool, stop: Callable[[], Awaitable[None]]) -> None:
        """Measure the run's folders every WATCH_INTERVAL s; past the budget, ``stop()`` the kernel."""
        if self.disk <= 0:
            return
        if sandboxed and launcher_pid:
            self.shm = f"/proc/{launcher_pid}/root/dev/shm"

        async def loop() -> None:
            while True:
                started = time.monotonic()
                await asyncio.to_thread(self.measure)
                if self.exceeded:
                    await stop()
                    return
                took = time.monotonic() - started
                await asyncio.sleep(max(WATCH_INTERVAL, took / WATCH_SHARE - took))

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop_watching(self) -> None:
        """The watch ended, and a last measure (the writes of the last moments) while the
        kernel's /dev/shm can still be read."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self.disk > 0 and not self.exceeded:
            await asyncio.to_thread(self.measure)

    # when it has ended -------------------------------------------------------------

    def outcome(self, failed: bool, error_name: str | None, kernel_died: bool,
                error_message: str = "") -> tuple[str, str] | None:
        """(reason, text) when the run went past a bound, else None. ``failed``: the run failed
        (``error_name``, ``error_message``: its failing cell's error; ``kernel_died``: the kernel died)."""
        if self.exceeded or (failed and self.disk > 0 and _past_budget(error_message, self.shm is not None)):
            return ResultReason.DISK_LIMIT_EXCEEDED, disk_text(self.disk_text, self.disk_field)
        if self.memory <= 0 or not failed:
            return None
        if self.cgroup is not None and oom_kills(self.cgroup) > 0:
            return ResultReason.OOM_KILLED, memory_text(self.memory_text, self.memory_field)
        if self.cgroup is None and error_name == "MemoryError":
            return ResultReason.OOM_KILLED, memory_text(self.memory_text, self.memory_field) + \
                " (RLIMIT_AS: the address space of each process)"
        if self.cgroup is None and kernel_died:
            return ResultReason.OOM_KILLED, memory_text(self.memory_text, self.memory_field) + \
                " (RLIMIT_AS: the kernel died, most likely at the limit of its address space)"
        return None

    def release(self) -> None:
        """Blocks: the run's cgroup removed (the kernel and all it started are gone)."""
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)

    def record(self) -> dict[str, Any]:
        """What the result document says of the bounds (``runner.bounds``)."""
        out: dict[str, Any] = {}
        if self.memory > 0:
            out["memory"] = {"limit": self.memory, "method": self.memory_used}
        if self.disk > 0:
            out["disk"] = {"budget": self.disk, "written": self.written}
        return out


def _past_budget(message: str, shm: bool) -> bool:
    """A write refused by the budget itself, when a measure missed it: a file past RLIMIT_FSIZE
    (EFBIG), or the sandbox's /dev/shm full (its tmpfs is the budget's size)."""
    return message.startswith("[Errno 27]") or (shm and message.startswith("[Errno 28]") and "/dev/shm/" in message)


def read_json_argument(option: str, path: str) -> Any:
    """The JSON document of a runner's file argument (``--bounds``, ``--sandbox``,
    ``--kernel-env-file``); ValueError naming the option and the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{option} {path}: {e}") from None


def read_bounds_file(path: str) -> dict[str, Any]:
    """The ``--bounds`` document, checked; ValueError naming what is wrong."""
    doc = read_json_argument("--bounds", path)
    if not isinstance(doc, dict) or set(doc) - {"memory", "disk"}:
        raise ValueError(f'--bounds {path}: must hold a JSON object with only "memory", "disk"')
    for key in ("memory", "disk"):
        part = doc.get(key)
        if part is None:
            continue
        if not isinstance(part, dict) or not isinstance(part.get("bytes"), int) or part["bytes"] < 0:
            raise ValueError(f"--bounds {path}: {key} must be an object with a whole number of bytes")
    paths = (doc.get("disk") or {}).get("paths") or []
    if not isinstance(paths, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
        raise ValueError(f"--bounds {path}: disk.paths must be a list of absolute paths")
    method = (doc.get("memory") or {}).get("method", "auto")
    if method not in ("auto", "cgroup", "rlimit"):
        raise ValueError(f"--bounds {path}: memory.method must be auto, cgroup or rlimit")
    return doc

