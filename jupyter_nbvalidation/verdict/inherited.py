"""What a kernel inherits from the process that starts it: the locale (``LANG``,
``LANGUAGE``, ``LC_*``) and the time zone (``TZ``). The runner passes exactly these
through to the kernel (runner/environment.py), and the verdict cache's key covers
their values (verdict/cache.py): one list for both. And what a kernel is never given by a
job (:func:`hijacks`): the variables that change how its interpreter or the dynamic loader
starts, refused at submit (spec/checks.py) and dropped by the runner (runner/environment.py).
Standard library only (the runner imports it: runner.SHARED_MODULES)."""

from __future__ import annotations

# by name; every ``LC_*`` variable too
PASSED_THROUGH = ("LANG", "LANGUAGE", "TZ")

# a job's variables (podConfig.env) may not be these: each changes what runs before the notebook's
# first cell (a library preloaded or searched first, a startup file, another interpreter home, an
# interactive prompt at exit) or is the runner's and the kernel protocol's own
HIJACKING = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "PYTHONHOME",
                       "PYTHONINSPECT", "PYTHONEXECUTABLE", "PYTHONSAFEPATH", "PYTHONPLATLIBDIR"})
HIJACKING_PREFIXES = ("LD_", "NBVALIDATION_", "JPY_")


def hijacks(name: str) -> bool:
    """Whether a variable named ``name`` would change how a kernel's interpreter or its loader
    starts, or is the runner's own: never given to a kernel by a job."""
    return name in HIJACKING or name.startswith(HIJACKING_PREFIXES)
