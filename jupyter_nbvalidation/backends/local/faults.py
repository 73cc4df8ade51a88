"""The local backend's classification of a failed run: the notebook's, or a Fault.

A run that failed for a reason that is not the notebook's is never its
verdict (backends.base.Fault; the engine retries or ends the job
InfrastructureFailed). Here, and only here, the local backend tells them
apart, from what a run leaves: the runner's result document, its exit status,
the tail of its log, and the filesystem it wrote to.

- the kernel failed to start (``KernelStartFailed``; e.g. under load): transient; but the
  sandbox refused to start it (a protection it must give cannot be had here): permanent;
- the disk is full (ENOSPC / EDQUOT): our own writes (run folder, result,
  executed notebook), or the failing cell's ``OSError: [Errno 28]``: permanent;
- the runner was killed by a signal we did not send (SIGKILL of the
  out-of-memory killer): permanent;
- the runner's internal error (``RunnerError``) or a runner that ended without
  a result: permanent;
- a build whose installer could not reach the package index (uv's and pip's
  connection errors): transient; one that cannot resolve a requirement stays
  the requirements' failure (BuildFailed); a build out of disk space: permanent.
"""

from __future__ import annotations

import errno
import os
import re
import signal
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.runner.sandbox as sandbox
from jupyter_nbvalidation.backends.base import Fault
from jupyter_nbvalidation.core.vocabulary import CellStatus, ResultReason

#: how the sandbox's launcher says it refused to start a kernel (runner/sandbox.py: a protection
#: it must give cannot be had here, e.g. idmapped mounts for a root server's kernel)
SANDBOX_REFUSED = f"nbvalidation sandbox: {sandbox.REFUSED}:"
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_SPACE_TEXT = re.compile(r"\[Errno (?:28|122)\]|No space left on device|Disk quota exceeded")
_PATH_TEXT = re.compile(r"""(?:\[Errno (?:28|122)\] [^:'"]*: |Cannot write the executed notebook )'?(/[^'\s:]+)""")
#: below this many free bytes a filesystem is full, as far as a run is concerned
FULL_BELOW = 64 * 1024


def no_space(where: str | Path, detail: str = "") -> Fault:
    """The disk-full fault: not the notebook's, and not transient (it stays full)."""
    detail = detail.strip()
    return Fault(f"No space left on device in {where}" + (f": {detail}" if detail else "."), transient=False)


def is_no_space(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS


def filesystem_full(path: str | Path) -> bool:
    """Whether the filesystem holding ``path`` (or its nearest existing parent) has
    (almost) no space or no inodes left for an unprivileged writer."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < FULL_BELOW or (st.f_files > 0 and st.f_favail == 0)


def fault_of_oserror(e: OSError, where: str | Path) -> Fault:
    """An OSError of our own writes for a run (its folder, log, files)."""
    if is_no_space(e):
        return no_space(e.filename or where, f"{e.strerror or e} (errno {e.errno}).")
    return Fault(f"The validation could not run: {e}", transient=False)


def _no_space_in(text: str, where: str | Path) -> Fault | None:
    if not _NO_SPACE_TEXT.search(text or ""):
        return None
    m = _PATH_TEXT.search(text)
    return no_space(m.group(1) if m else where, text.strip()[:300])


def fault_of_result(result: dict[str, Any], where: str | Path) -> Fault | None:
    """A Fault when a run's result document says the failure is not the notebook's;
    None for a notebook verdict (a failed cell, a mismatch, a timeout)."""
    reason = result.get("reason")
    message = str(result.get("message") or "")
    if result.get("verdict") == "Succeeded":
        return None
    if reason in (ResultReason.OOM_KILLED, ResultReason.DISK_LIMIT_EXCEEDED):
        return None  # past the run's own bounds (an ENOSPC of its /dev/shm, too): the notebook's
    if reason in (ResultReason.KERNEL_START_FAILED, ResultReason.RUNNER_ERROR):
        full = _no_space_in(message, where)
        if full is not None:
            return full
    refused = message.find(SANDBOX_REFUSED)
    if reason == ResultReason.KERNEL_START_FAILED and refused >= 0:  # the sandbox could not hold: said, not retried
        return Fault(f"The sandbox refused to start the kernel: {message[refused + len(SANDBOX_REFUSED):].strip()}",
                     transient=False)
    if reason == ResultReason.KERNEL_START_FAILED:
        return Fault(message or "The kernel failed to start.", transient=True)
    if reason == ResultReason.RUNNER_ERROR:
        return Fault(message or "The runner failed (an internal error, not the notebook's).", transient=False)
    # the failing cell ran out of disk: the machine's fault, not the notebook's
    index = result.get("failedCellIndex")
    cells = result.get("results") or []
    if isinstance(index, int) and 0 <= index < len(cells):
        cell = cells[index] or {}
        name = str(cell.get("errorName") or "")
        text = str(cell.get("errorMessage") or "")
        if cell.get("status") == CellStatus.FAILURE and name.endswith("Error") and re.match(
                r"\[Errno (?:28|122)\]", text):
            return no_space(where, f"cell {index + 1} failed with {name}: {text}")
    return None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def fault_of_exit(code: int | None, tail: str, where: str | Path) -> Fault:
    """The runner ended without a result (never a notebook verdict): why, as far as
    its exit status, its log's tail and the filesystem tell."""
    full = _no_space_in(tail, where)
    if full is not None:
        return full
    if filesystem_full(where):
        return no_space(where, f"the runner exited with {code} without a result.")
    if code is not None and code < 0:
        sig = -code
        if sig == signal.SIGKILL:
            return Fault("The runner was killed by signal 9 (SIGKILL; the out-of-memory killer?) "
                         "before it wrote a result.", transient=False)
        return Fault(f"The runner was killed by signal {sig} ({signal_name(sig)}) before it wrote a result.",
                     transient=False)
    return Fault(f"The runner exited with {code} without a result" + (f": {tail}" if tail else "."),
                 transient=False)


# uv ("error sending request", "tcp connect error", "dns error", "Request failed after 3 retries")
# and pip ("Failed to establish a new connection", "Could not fetch URL") when the index cannot be reached
_INDEX_UNREACHABLE = re.compile(
    r"error sending request|tcp connect error|dns error|Connection refused|Network is unreachable|"
    r"Temporary failure in name resolution|Name or service not known|Request failed after \d+ retries|"
    r"Failed to establish a new connection|Could not fetch URL|connection reset|operation timed out",
    re.IGNORECASE)


def fault_of_build(tail: str, where: str | Path) -> Fault | None:
    """A Fault when a failed build step's output (its log's tail) says the failure is not the
    requirements': the package index could not be reached (transient), the disk is full."""
    full = _no_space_in(tail, where)
    if full is not None:
        return full
    if _INDEX_UNREACHABLE.search(tail or ""):
        return Fault(f"The package index could not be reached: {tail.strip()[:500]}", transient=True)
    return None
