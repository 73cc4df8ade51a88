"""Everything a validation starts ends with it (Linux ``/proc``; standard library only).

Three nets, because a notebook can leave the kernel's process group and session
(``Popen(start_new_session=True)``, a double-forked daemon):

1. the kernel's process group is killed (what stayed in its session);
2. the runner is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan
   of any of its descendants is re-parented to the runner instead of to init, so
   a double-forked daemon stays in the runner's process tree, and every
   descendant is killed at the end;
3. every process whose environment (``/proc/<pid>/environ``, as it was when the
   process started) holds ``NBVALIDATION_RUN_ID=<this run>`` is killed: the
   kernel and whatever it starts inherit the variable. This net also works after
   the runner itself was killed (the local backend runs it once the runner has
   exited, and the start-up sweep for runs whose runner is dead).

The limit: a process that both leaves the runner's tree (only possible when the
runner is gone, or on a system without subreapers) and was started with an
environment that drops the variable (``env -i``) is not found; nor is one that
changes to another user. Containment against a hostile notebook needs a
container or a cgroup (the Kubernetes backend's Pod).

The runner's temporary folder (``nbvalidation-*``: the kernel's connection file
with its key; the kernel's own folder ``k/``: its ``HOME``/``TMPDIR``, its sockets)
records its owner (``owner.json``: pid, process start time, run id), so a sweep removes
only folders whose owner is dead. In the sandbox the folder is read-only to the kernel
but for ``k/`` (runner/sandbox.py, KERNEL_FOLDER); without it the kernel runs as
the runner's user and could rewrite the record, so the sweep trusts nothing of it it
has not checked (:func:`read_owner`): no link followed, the folder and the file its
own user's, the record of the one shape the runner writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import tempfile
import time
from typing import Any, Iterable

from jupyter_nbvalidation.runner.environment import RUN_ID_VAR

TEMP_PREFIX = "nbvalidation-"
OWNER_FILE = "owner.json"
OWNER_MAX_BYTES = 4096  # the runner writes about 80
RUN_ID_MAX = 256
PR_SET_CHILD_SUBREAPER = 36


def set_child_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux >= 3.4)."""
    try:
        import ctypes  # deferred: start-up time (ctypes loads libffi; only for PR_SET_CHILD_SUBREAPER)

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except Exception:
        return False


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of ``pid``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    try:
        fields = data[data.rindex(")") + 2:].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (ValueError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else st[2]


def live_start_time(pid: int) -> int | None:
    """The start time of ``pid`` while it runs: None once it is gone or only its
    zombie is left. With the pid it names one process, whatever reuses the pid."""
    st = _stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[2]


def kill_group(pgid: int, sig: int = signal.SIGTERM) -> None:
    """Signal a process group; one that is gone (or not ours) is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = _stat(pid)
        if st is None:
            break
        pid = st[1]
    return out


def _marked(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in b"\0" + f.read()
    except OSError:
        return False


def find(run_id: str | None = None, *, descendants_of: int | None = None) -> list[int]:
    """Live processes of a run: those whose environment carries ``run_id``, and/or
    the descendants of ``descendants_of``. Never this process or its ancestors."""
    protected = _ancestors(os.getpid()) | {os.getpid()}
    needle = f"\0{RUN_ID_VAR}={run_id}\0".encode() if run_id else None
    parents: dict[int, int] = {}
    found = set()
    for pid in _pids():
        st = _stat(pid)
        if st is None or st[0] == "Z":  # zombies are already dead
            continue
        parents[pid] = st[1]
        if needle is not None and pid not in protected and _marked(pid, needle):
            found.add(pid)
    if descendants_of is not None:
        for pid in parents:
            p, seen = pid, set()
            while p in parents and p not in seen:
                seen.add(p)
                p = parents[p]
                if p == descendants_of:
                    found.add(pid)
                    break
    return sorted(found - protected)


def _reap(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def kill_all(run_id: str | None = None, *, descendants_of: int | None = None, rounds: int = 100) -> int:
    """SIGKILL the processes of a run until none is left (a process may fork while
    the others die). Returns how many were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = find(run_id, descendants_of=descendants_of)
        if not pids:
            break
        for pid in pids:  # stop them all first: none forks a replacement meanwhile
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        _reap(pids)
        time.sleep(0.01)
    _reap(killed)
    return len(killed)


# --- the runner's temporary folder -----------------------------------------------


def make_temp_dir(run_id: str) -> str:
    """``$TMPDIR/nbvalidation-XXXX`` with its ``owner.json`` (mode 0700)."""
    path = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    owner = {"pid": os.getpid(), "startTime": start_time(os.getpid()), "runId": run_id}
    fd = os.open(os.path.join(path, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(owner, f)
    return path


def _owner_alive(owner: dict[str, Any]) -> bool:
    """``owner`` as :func:`read_owner` returns it: its process runs (the same one: not a reused pid)."""
    return bool(start_time(owner["pid"]) == owner["startTime"])


def _valid_owner(owner: Any) -> bool:
    """The record the runner writes, and nothing else: ``{"pid": int > 1, "startTime": int >= 0,
    "runId": a printable string}`` (a kill of "every process of the run" is never of an empty id)."""
    if not isinstance(owner, dict) or set(owner) != {"pid", "startTime", "runId"}:
        return False
    pid, started, run_id = owner["pid"], owner["startTime"], owner["runId"]
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (pid, started))
    return (ints and pid > 1 and started >= 0 and isinstance(run_id, str) and 0 < len(run_id) <= RUN_ID_MAX
            and run_id.isprintable() and "=" not in run_id)


def read_owner(path: str) -> dict[str, Any] | None:
    """The owner record of the runner's temporary folder ``path``, or None when there is none
    to trust: ``path`` or its ``owner.json`` a link (never followed), not a folder and a regular
    file, not this user's, the file writable by others or too large, or not the record's shape."""
    uid = os.geteuid()
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            return None
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        seen = os.fstat(folder)
        if (seen.st_dev, seen.st_ino) != (st.st_dev, st.st_ino):  # swapped between the two looks
            return None
        fd = os.open(OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        try:
            fst = os.fstat(fd)
            if (not stat.S_ISREG(fst.st_mode) or fst.st_uid != uid or fst.st_mode & 0o022
                    or fst.st_size > OWNER_MAX_BYTES):
                return None
            data = os.read(fd, OWNER_MAX_BYTES + 1)
        finally:
            os.close(fd)
        owner = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(folder)
    return owner if _valid_owner(owner) else None


def sweep(temp_dir: str | None = None) -> list[str]:
    """Remove the ``nbvalidation-*`` folders (and stop the processes) of runs whose
    runner is dead. Folders without an owner record to trust (:func:`read_owner`) are
    left alone (another runner may be writing it this instant, or it is not ours); a
    link is never followed, into the folder or out of it."""
    base = temp_dir or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(base) if n.startswith(TEMP_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        owner = read_owner(path)
        if owner is None or _owner_alive(owner):
            continue
        kill_all(owner["runId"])
        shutil.rmtree(path, ignore_errors=True)  # by descriptors: a link inside is removed, never followed
        removed.append(path)
    return removed
