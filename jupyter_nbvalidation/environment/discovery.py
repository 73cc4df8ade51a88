"""Where a job's environment is declared, when its spec names no source: the
file a repository declares its environment in, found in repo2docker's order
(:data:`KINDS`; each kind's module says how its file becomes requirement lines,
which then go through the same checks as a requirements file, collector.py).

The search (:func:`discover`):

- the **repository root** is the nearest folder at or above the notebook's
  folder that holds ``.git`` (a folder or a file), at or below the server
  root; without one, the server root itself. Nothing above the server root
  is looked at; the folders are walked as the notebook's API path names them
  and every file is read through :func:`reading.read_confined` (a link
  resolving outside the root is refused, unread);
- from the notebook's folder upward to the repository root, the first folder
  holding one of, in this order: ``environment.yml`` (``environment.yaml``),
  ``pylock.toml``, ``uv.lock``, ``Pipfile.lock``, ``Pipfile``,
  ``requirements.txt``, ``pyproject.toml`` (with a ``[project]`` or
  ``[build-system]`` table) or ``setup.py`` -- the nearest folder wins, so
  ``requirements.txt`` beside the notebook is used as before;
- at the repository root, a ``binder/`` (or ``.binder/``) folder takes the
  place of the root's own files, as in repo2docker: only the files in it are
  used (environment.yml, pylock.toml, uv.lock, Pipfile.lock, Pipfile,
  requirements.txt).

environment.yml stays first, as in repo2docker (a repository that builds on
Binder gets the environment Binder builds); why the lock files come next:
kinds/lock_files.py. A repository that wants what Binder does when both are
present keeps its files in ``binder/``.

Beside the chosen file: ``runtime.txt`` (the Python asked for, before what the
file itself asks: :func:`python_requirement`), ``apt.txt`` (system packages, for a
backend that installs them) and repo2docker's files not acted on here
(:func:`not_run_here`).
"""

from __future__ import annotations

import os

from jupyter_nbvalidation.environment.kinds.apt_txt import APT_TXT, AptTxt
from jupyter_nbvalidation.environment.kinds.base import (
    PLACE_ABOVE,
    PLACE_BESIDE,
    PLACE_BINDER,
    PLACE_ROOT,
    Discovered,
    Kind,
)
from jupyter_nbvalidation.environment.kinds.environment_yml import EnvironmentYml
from jupyter_nbvalidation.environment.kinds.lock_files import PylockToml, environments_fit
from jupyter_nbvalidation.environment.kinds.pipfile import Pipfile, PipfileLock
from jupyter_nbvalidation.environment.kinds.pyproject import Pyproject
from jupyter_nbvalidation.environment.kinds.requirements_txt import RequirementsTxt
from jupyter_nbvalidation.environment.kinds.runtime_txt import RuntimeTxt
from jupyter_nbvalidation.environment.kinds.uv_lock import UvLock
from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, bounded, inside, rel

# what the package's other modules take from here (service/jobs.py: environments_fit, bounded)
__all__ = ["APT", "KINDS", "NOT_RUN", "PLACE_ABOVE", "PLACE_BESIDE", "PLACE_BINDER", "PLACE_ROOT", "RUNTIME",
           "Discovered", "bounded", "discover", "environments_fit", "kind_of", "not_run_here", "nothing_found",
           "python_requirement", "repository_root"]

#: The kinds of file tried in each folder, in this order (the first found wins; in a binder/
#: folder, only those with ``in_binder``). See the module's docstring for why.
KINDS: list[Kind] = [
    EnvironmentYml(),  # environment.yml, environment.yaml
    PylockToml(),  # pylock.toml
    UvLock(),  # uv.lock
    PipfileLock(),  # Pipfile.lock
    Pipfile(),  # Pipfile
    RequirementsTxt(),  # requirements.txt
    Pyproject(),  # pyproject.toml (a project's), setup.py: never in binder/
]
#: beside the chosen file: the Python version asked for, then the system packages
RUNTIME = RuntimeTxt()
APT = AptTxt()

#: repo2docker's files that are not an environment's Python packages, and are not acted on here
NOT_RUN = (("apt.txt", "apt.txt (system packages)"), ("postBuild", "postBuild"), ("start", "start"),
           ("install.R", "install.R"), ("DESCRIPTION", "DESCRIPTION (R)"), ("Project.toml", "Project.toml (Julia)"))


def kind_of(found: Discovered) -> Kind:
    """The kind of the file :func:`discover` found."""
    return next(k for k in KINDS if found.kind in k.names)


def repository_root(nb_dir: str, root: str) -> str:
    """The nearest folder from ``nb_dir`` up to ``root`` (both absolute, the
    first under the second) holding ``.git``; ``root`` without one."""
    folder = os.path.normpath(nb_dir)
    root = os.path.normpath(root)
    if not inside(folder, root):
        return root
    while True:
        if os.path.lexists(os.path.join(folder, ".git")):
            return folder
        if folder == root:
            return root
        folder = os.path.dirname(folder)


def discover(root: str, rel_nb_dir: str) -> Discovered:
    """The file the environment comes from, for a notebook in ``rel_nb_dir``
    (its folder as an API path) under the server root ``root``. Raises
    :class:`RequirementsError` for a repository with both binder folders or
    an unreadable pyproject.toml."""
    root = os.path.realpath(root)
    nb_dir = os.path.normpath(os.path.join(root, rel_nb_dir))
    if not inside(nb_dir, root):
        nb_dir = root
    repo = repository_root(nb_dir, root)
    looked: list[str] = []
    folder = nb_dir
    while True:
        place = PLACE_BESIDE if folder == nb_dir else PLACE_ROOT if folder == repo else PLACE_ABOVE
        if folder == repo:
            binders = [b for b in ("binder", ".binder") if os.path.isdir(os.path.join(repo, b))]
            if len(binders) == 2:
                raise RequirementsError(FIELD, f"the repository at {rel(repo, root)} has both a binder and a "
                                               ".binder folder; keep one (as repo2docker requires)")
            if binders:
                binder = os.path.join(repo, binders[0])
                looked.append(f"{rel(binder, root)} ({PLACE_BINDER})")
                for kind in KINDS:
                    name = kind.detect(binder, root) if kind.in_binder else None
                    if name is not None:
                        path = os.path.join(binder, name)
                        return Discovered(name, path, rel(path, root), PLACE_BINDER, looked)
                return Discovered(None, looked_in=looked)
        shown_folder = rel(folder, root)
        looked.append(shown_folder + (" (repository root)" if folder == repo else ""))
        for kind in KINDS:
            name = kind.detect(folder, root)
            if name is not None:
                path = os.path.join(folder, name)
                return Discovered(name, path, rel(path, root), place, looked)
        if folder == repo:
            return Discovered(None, looked_in=looked)
        folder = os.path.dirname(folder)


def nothing_found(found: Discovered) -> str:
    """The origin when no file declares the environment."""
    return bounded("no dependencies declared: looked in " + ", ".join(found.looked_in))


def python_requirement(found: Discovered, root: str) -> tuple[str, str] | None:
    """The Python version the repository asks for, as a PEP 440 specifier and
    where it says so: ``runtime.txt`` beside the chosen file (repo2docker's
    ``python-3.X[.Y]``), else what the chosen file asks (pyproject.toml's
    ``requires-python``, a lock's own, environment.yml's ``python`` dependency:
    conda's ``python=3.10`` is 3.10.*). None when it asks for none. Raises
    :class:`RequirementsError` for a runtime.txt that names no Python version
    (repo2docker's R runtimes included: not available here)."""
    if found.kind is None:
        return None
    runtime = RUNTIME.detect(os.path.dirname(found.path))
    if runtime is not None:
        return RUNTIME.python(runtime, root)
    return kind_of(found).python(found, root)


def not_run_here(folder: str, *, system_packages: bool = False) -> list[str]:
    """The repo2docker files beside the environment's file that are not acted on here (a
    notebook that needs what they do fails, and its verdict says why it may have).
    ``system_packages``: the backend installs apt.txt (read by :data:`APT`)."""
    return [shown for name, shown in NOT_RUN if os.path.isfile(os.path.join(folder, name))
            and not (system_packages and name == APT_TXT)]
