"""The one walk of a folder and the one list of what it leaves out.

Two things read a folder entry by entry, and they read it with this walk:

- a notebook's folder, as the kernel may see it: the verdict key hashes it
  (verdict/cache.py) and the local backend copies it for the kernel to work in
  (backends/workcopy.py), so both see exactly the same entries;
- a package's source tree a job installs from a local path (a project, a
  package folder, a ``--find-links`` folder): its content is hashed into the
  environment's cache key and packed to travel with the job
  (environment/trees.py, ``source_tree=True``).

Both leave out :data:`EXCLUDED_DIRS` and virtual environments (a folder holding
``pyvenv.cfg``). A source tree differs where it must, by the named parameter
``source_tree`` (see :func:`excluded`). Pure but for reading the folder.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# Left out of a notebook's folder, by name, in the verdict key AND in the copy the kernel
# works in (one list, so that the key covers exactly what the notebook can see): version
# control's metadata, Jupyter's checkpoints, caches a tool rebuilds; virtual environments
# (a folder holding pyvenv.cfg) too (is_excluded). Hidden files and other hidden folders
# are in both.
EXCLUDED_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", ".ipynb_checkpoints", "__pycache__", "node_modules",
                           ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox"})

# A package's source tree (source_tree=True) is what its build reads, and its hash is the key
# of environments already built: it keeps two folders of EXCLUDED_DIRS that a package's
# sources may carry for their build (a JavaScript extension's node_modules, a Bazaar
# checkout's .bzr), and leaves out what a build or a tool writes into a source tree
# (setuptools writes ``*.egg-info`` and ``build/`` beside the sources when uv or pip builds
# it; ``dist/``, ``.eggs``, a ``.venv``), which is not content: otherwise every build would
# change the key of the next one.
SOURCE_TREE_KEPT = frozenset({".bzr", "node_modules"})
BUILD_ARTEFACT_DIRS = frozenset({".eggs", ".venv"})
TOP_BUILD_ARTEFACT_DIRS = frozenset({"build", "dist"})  # at the top of the tree only
BYTECODE_SUFFIXES = (".pyc", ".pyo")  # left out of a source tree (a build writes them)
_SOURCE_TREE_EXCLUDED = (EXCLUDED_DIRS - SOURCE_TREE_KEPT) | BUILD_ARTEFACT_DIRS


@dataclass(frozen=True)
class Entry:
    """One entry of a folder as :func:`walk_folder` gives it."""

    rel: str  # '/'-separated, relative to the folder
    kind: str  # "dir", "file", "again" (a folder reached before: a link cycle, a second link),
    #            "link" (a symbolic link not followed: it leaves the root, or leads nowhere;
    #            with source_tree, every link)
    path: str  # the path as walked (through links)
    real: str  # the real path ("link": the link's target, absolute)
    size: int = 0


def is_excluded(name: str, path: str) -> bool:
    """A folder left out of both the verdict key and the kernel's copy: a name of
    EXCLUDED_DIRS or a virtual environment (it holds ``pyvenv.cfg``)."""
    return name in EXCLUDED_DIRS or os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def excluded(name: str, path: str, *, top: bool = False, source_tree: bool = False) -> bool:
    """A folder :func:`walk_folder` leaves out: :func:`is_excluded`, or, in a source tree,
    the same list but SOURCE_TREE_KEPT, and the build artefacts (BUILD_ARTEFACT_DIRS,
    ``*.egg-info``, TOP_BUILD_ARTEFACT_DIRS when ``top``)."""
    if not source_tree:
        return is_excluded(name, path)
    return (name in _SOURCE_TREE_EXCLUDED or name.endswith(".egg-info") or (top and name in TOP_BUILD_ARTEFACT_DIRS)
            or os.path.isfile(os.path.join(path, "pyvenv.cfg")))


def walk_folder(folder: str | Path, root: str | Path | None = None,
                skip: frozenset[str] | set[str] = frozenset(), *, source_tree: bool = False) -> Iterator[Entry]:
    """What a notebook working in ``folder`` can see there: every entry, depth first in
    name order, symbolic links followed while they stay in ``root`` (the folder itself
    when None), a folder reached twice (a link cycle) given once and then as "again";
    EXCLUDED_DIRS, virtual environments, the real paths in ``skip`` and special files
    (sockets, FIFOs, devices) left out. The ONE walk of the verdict key and of the
    kernel's copy of the folder (backends/workcopy.py): both see the same entries. A
    folder that cannot be listed is given, empty.

    ``source_tree``: a package's source tree, as its content hash and its archive read it
    (environment/trees.py). Links are never followed there (every one is a "link": the
    archive holds the link, not what it points to, so the hash must too), the folders
    left out are :func:`excluded`'s for a source tree, bytecode files are left out, and
    what is neither a folder nor a link is a "file" (a file whose ``stat`` fails raises
    OSError: the tree cannot be hashed)."""
    folder = os.fspath(folder)
    top = os.path.realpath(folder)
    confine = os.path.realpath(os.fspath(root)) if root is not None else top
    visited = {top}
    stack = [(folder, "")]
    while stack:
        dirpath, rel_dir = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                names = sorted(e.name for e in it)
        except PermissionError:
            continue  # a folder its owner cannot list: nothing in it is readable to the kernel either
        except OSError:
            if source_tree:
                continue  # as os.walk: a folder that cannot be listed holds nothing
            raise
        subdirs = []
        for name in names:
            path = os.path.join(dirpath, name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            real = os.path.realpath(path)
            if real in skip:
                continue
            if source_tree and os.path.islink(path):
                if name.endswith(BYTECODE_SUFFIXES):
                    continue
                target = os.path.join(os.path.realpath(dirpath), os.readlink(path))
                yield Entry(rel, "link", path, os.path.normpath(target))
                continue
            if os.path.islink(path) and (real != confine and not real.startswith(confine + os.sep)
                                         or not os.path.exists(path)):
                target = os.path.join(os.path.realpath(dirpath), os.readlink(path))
                yield Entry(rel, "link", path, os.path.normpath(target))
                continue
            try:
                st = os.stat(path)
            except OSError:
                if source_tree and not name.endswith(BYTECODE_SUFFIXES):
                    raise
                continue
            if stat.S_ISDIR(st.st_mode):
                if excluded(name, path, top=not rel_dir, source_tree=source_tree):
                    continue
                if real in visited:
                    yield Entry(rel, "again", path, real)
                    continue
                visited.add(real)
                yield Entry(rel, "dir", path, real)
                subdirs.append((path, rel))
            elif source_tree:
                if not name.endswith(BYTECODE_SUFFIXES):
                    yield Entry(rel, "file", path, real, st.st_size)
            elif stat.S_ISREG(st.st_mode):
                yield Entry(rel, "file", path, real, st.st_size)
        stack.extend(reversed(subdirs))
