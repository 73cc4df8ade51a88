"""A full disk, said plainly: which device, which path, how much is free.

ENOSPC and EDQUOT (and SQLite's "database or disk is full") mean the same to a user: the
data dir's disk has no room. :func:`no_space` names the device, the path and the free space
("no space left on /dev/sda1 (/var/lib/nbvalidation): 0 bytes free"), so the message says
what to clear, wherever the write failed (the store, a log, the executed notebook, an
environment build, a run's copy). Standard library only."""

from __future__ import annotations

import errno
import os

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: a write refused by SQLite with this little free space is a full disk, not damage
NEARLY_FULL_BYTES = 1 << 20


def is_no_space(e: BaseException) -> bool:
    """Whether ``e`` says the disk (or the user's quota) is full."""
    if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS:
        return True
    text = str(e).lower()
    return "database or disk is full" in text or "no space left" in text or "quota exceeded" in text


def _existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def free_bytes(path: str) -> int | None:
    """Bytes free for an unprivileged writer on the file system of ``path`` (or its nearest
    existing parent); None when it cannot be read."""
    try:
        st = os.statvfs(_existing(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def device_of(path: str) -> str:
    """The device (or file system) ``path`` is on, from /proc/self/mounts: the longest mount
    point above it; the mount point itself where the table cannot be read."""
    real = os.path.realpath(_existing(path))
    best, device = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 2:
                    continue
                point = parts[1].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, device = point, parts[0]
    except OSError:
        return real
    return device or best or real


def no_space(path: str) -> str:
    """"no space left on DEVICE (PATH): N bytes free"."""
    free = free_bytes(path)
    shown = "unknown" if free is None else f"{free} bytes"
    return f"no space left on {device_of(path)} ({path}): {shown} free"


def nearly_full(path: str) -> bool:
    free = free_bytes(path)
    return free is not None and free < NEARLY_FULL_BYTES
