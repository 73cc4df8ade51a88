"""Keep the Jupyter server responsive while jobs compute.

Builds, runners and kernels run at a lower CPU priority. On Linux with
scheduler autogroups (``/proc/sys/kernel/sched_autogroup_enabled``), each
new session is its own scheduling group and a plain ``nice`` value only
ranks processes *inside* a group, so the group's own nice value is set too
(``/proc/<pid>/autogroup``).
"""

from __future__ import annotations

import os


def deprioritize(pid: int, niceness: int) -> None:
    """Lower the scheduling priority of ``pid``'s autogroup (best effort)."""
    if niceness <= 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(min(19, niceness)))
    except OSError:
        pass  # not Linux, autogroups disabled, or the process is gone


def own_niceness() -> int:
    try:
        return os.nice(0)
    except OSError:
        return 0
