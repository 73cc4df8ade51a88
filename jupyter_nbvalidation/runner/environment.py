"""The environments of the kernel and of the runner, built from an allow-list.

Nothing of the caller's environment reaches a kernel unless listed here. A
kernel gets exactly:

* ``PATH``: the ``bin`` folder of its interpreter, then ``/usr/local/bin:/usr/bin:/bin``;
* ``VIRTUAL_ENV`` when that interpreter belongs to a virtual environment;
* the locale (``LANG``, ``LANGUAGE``, ``LC_*``) and ``TZ``, when the runner has them;
* ``HOME``, ``IPYTHONDIR``, ``TMPDIR``, ``JUPYTER_CONFIG_DIR``, ``JUPYTER_DATA_DIR``,
  ``JUPYTER_RUNTIME_DIR``: empty folders of this run (in the runner's temporary
  folder, removed with it), so no IPython profile, startup file or Jupyter
  configuration of anyone applies;
* ``PYTHONNOUSERSITE=1`` (no user site-packages);
* ``PYTHONDONTWRITEBYTECODE=1``: the kernel writes no bytecode. A built environment
  is compiled by its build and sealed (backends/local/seal.py); a kernel that wrote
  a ``.pyc`` there would change it for the next run;
* ``NBVALIDATION_RUN_ID``: this run's identity, by which everything the kernel
  starts is found and stopped when the run ends (see :mod:`.hygiene`);
* the job's own variables (``podConfig.env``), given to the runner by
  ``--kernel-env`` / ``--kernel-env-file``, never through its own environment; but
  never one that changes how the interpreter or its loader starts
  (``verdict.inherited.hijacks``: ``LD_PRELOAD``, ``PYTHONSTARTUP``, ...), which the
  spec check refuses at submit too.

Standard library only.
"""

from __future__ import annotations

import os
import site
import sys
import tempfile
from typing import Mapping

from jupyter_nbvalidation.verdict.inherited import PASSED_THROUGH, hijacks

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_ID_VAR = "NBVALIDATION_RUN_ID"
PRIVATE_DIRS = {
    "HOME": "home",
    "IPYTHONDIR": "ipython",
    "TMPDIR": "tmp",
    "JUPYTER_CONFIG_DIR": "jupyter/config",
    "JUPYTER_DATA_DIR": "jupyter/data",
    "JUPYTER_RUNTIME_DIR": "jupyter/runtime",
}
# set by the runner, a job's podConfig.env cannot replace them
ENFORCED = frozenset({"PATH", "VIRTUAL_ENV", "HOME", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", RUN_ID_VAR})


def passed_through(source: Mapping[str, str]) -> dict[str, str]:
    """Locale and time zone of ``source``."""
    return {k: v for k, v in source.items() if k in PASSED_THROUGH or k.startswith("LC_")}


def private_dirs(root: str) -> dict[str, str]:
    """``HOME`` and friends as fresh folders under ``root`` (created, mode 0700)."""
    out = {}
    for var, rel in PRIVATE_DIRS.items():
        path = os.path.join(root, rel)
        os.makedirs(path, mode=0o700, exist_ok=True)
        out[var] = path
    return out


def interpreter_paths(python: str) -> dict[str, str]:
    """``PATH`` (and ``VIRTUAL_ENV``) for an interpreter: its own ``bin``, then the system's."""
    bindir = os.path.dirname(python)
    env = {"PATH": bindir + os.pathsep + SYSTEM_PATH if bindir else SYSTEM_PATH}
    root = os.path.dirname(bindir)
    if bindir and os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        env["VIRTUAL_ENV"] = root
    return env


def kernel_environment(python: str, root: str, run_id: str, *, extra: Mapping[str, str] | None = None,
                       source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a kernel running ``python``; its folders live under ``root``."""
    env = passed_through(os.environ if source is None else source)
    env["PYTHONNOUSERSITE"] = "1"
    dirs = private_dirs(root)
    env.update(dirs)
    env.update({k: v for k, v in (extra or {}).items() if not hijacks(k)})  # the job's podConfig.env
    env.update({k: v for k, v in dirs.items() if k in ENFORCED})
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # enforced too: a job's podConfig.env cannot undo it
    env.update(interpreter_paths(python))
    env[RUN_ID_VAR] = run_id
    return env


def _package_parent() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def runner_environment(root: str, run_id: str, *, python: str | None = None,
                       source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a runner process started by a server (the local backend).

    As a kernel's, but: the runner's own interpreter on ``PATH``, ``TMPDIR`` the
    system's temporary folder (the runner's ``nbvalidation-*`` folder goes there,
    short enough for the kernel's IPC sockets; the start-up sweep looks there), and
    ``PYTHONPATH`` naming only the folder this package is imported from when that is
    not one of the interpreter's own site folders (a source checkout). The job's
    variables are not in it."""
    env = private_dirs(root)  # TMPDIR is then the system's (below)
    env.update(forkserver_environment(python=python, source=source))
    env[RUN_ID_VAR] = run_id
    return env


def forkserver_environment(*, python: str | None = None, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """A runner's environment without what is one run's own (its private folders,
    its run id): the environment of the fork server (:mod:`.forkserver`), which
    each runner it forks replaces with its run's whole ``runner_environment``."""
    python = python or sys.executable
    env = passed_through(os.environ if source is None else source)
    env.update(interpreter_paths(python))
    env.update(PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", TMPDIR=tempfile.gettempdir())
    parent = _package_parent()
    try:
        own = {os.path.realpath(p) for p in site.getsitepackages()}
    except AttributeError:  # pragma: no cover - some embedded interpreters
        own = set()
    if os.path.realpath(parent) not in own:
        env["PYTHONPATH"] = parent
    return env
