"""The kernel's bounds, set in its process before it runs (standard library only).

Loaded by path by the sandbox's launcher (``runner/sandbox.py``, run with ``python -I
-S``), or run as the kernel's own launcher where there is no sandbox::

    python -I -S bounds.py CONFIG.json -- KERNEL ARGV...

``CONFIG.json`` is ``{"cgroup": folder, "rlimitAs": bytes, "fsize": bytes, "shm": bytes}``
(every key optional; :mod:`.limits` writes it):

* ``cgroup``: a memory cgroup made for this run (its limit set by the runner): this
  process joins it, so the kernel and everything it starts are in it, and the
  out-of-memory killer of that cgroup stops the kernel past the limit;
* ``rlimitAs``: where no cgroup can be made, ``RLIMIT_AS`` (the address space of
  each process; an allocation past it fails, ``MemoryError`` in Python; glibc's malloc
  arenas capped at 2, ``MALLOC_ARENA_MAX``, as each reserves 64 MiB);
* ``fsize``: ``RLIMIT_FSIZE``, no file written larger than the run's disk budget
  (a write past it fails with ``EFBIG``: Python ignores ``SIGXFSZ``);
* ``shm``: the size of the sandbox's private ``/dev/shm`` (a tmpfs mounted by
  :func:`mount_shm` in the namespace, after the sandbox's own mounts).

Everything here runs before the kernel's interpreter starts; a bound that cannot be
set is an error (the launcher exits 125), never a kernel without its bound.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any, Callable, Mapping, Sequence

SHM = "/dev/shm"
_state: dict[str, Any] = {}


def apply(config: Mapping[str, Any] | None) -> None:
    """Join the cgroup and set the limits ``config`` names, in this process (they are
    inherited by what it starts). Raises OSError when one cannot be set."""
    config = config or {}
    cgroup = config.get("cgroup")
    if cgroup:
        with open(os.path.join(str(cgroup), "cgroup.procs"), "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    for key, which in (("rlimitAs", resource.RLIMIT_AS), ("fsize", resource.RLIMIT_FSIZE)):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
    if config.get("rlimitAs"):  # glibc reserves 64 MiB of address space per thread's arena otherwise
        os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    _state["shm"] = config.get("shm")


def mount_shm(mount: Callable[[str | None, str, str | None, int, str | None], None], flags: int) -> None:
    """In the sandbox's mount namespace: a fresh tmpfs of ``shm`` bytes over /dev/shm
    (what :func:`apply` was given; nothing without it). ``mount`` is the launcher's."""
    size = _state.get("shm")
    if isinstance(size, int) and size > 0 and os.path.isdir(SHM):
        mount("tmpfs", SHM, "tmpfs", flags, f"mode=1777,size={size}")


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: bounds.py CONFIG.json -- COMMAND...\n")
        return 2
    try:
        with open(argv[0], encoding="utf-8") as f:
            config = json.load(f)
        apply(config.get("bounds") if isinstance(config, dict) and "bounds" in config else config)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"nbvalidation bounds: {e}\n")
        return 125
    try:
        os.execvp(argv[2], list(argv[2:]))
    except OSError as e:
        sys.stderr.write(f"nbvalidation bounds: cannot run {argv[2]}: {e}\n")
        return 127
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
