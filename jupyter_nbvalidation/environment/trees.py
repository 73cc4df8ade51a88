"""The content of a local path a job installs from (a project, a package folder, a
wheel, a ``--find-links`` folder): hashed into the environment's cache key
(:func:`tree_hash`, so an edit rebuilds) and packed to travel with the job
(local_sources.py), both over the one folder walk (core/folders.py, as a source
tree: build and tool artefacts, virtual environments and bytecode left out,
links never followed)."""

from __future__ import annotations

import hashlib
import os
from typing import Iterator

from jupyter_nbvalidation.core.folders import walk_folder

MAX_TREE_FILES = 20000  # a local package or --find-links folder, hashed into the cache key
MAX_TREE_BYTES = 512 * 2**20


def walk_tree(path: str) -> "Iterator[tuple[str, str, os.stat_result | None]]":
    """The content of the folder ``path`` as :func:`tree_hash` reads it, in a
    fixed order: (relative path, full path, its stat, or None for a link, which is
    never followed). Build and tool artefacts, virtual environments and bytecode
    are left out (core/folders.py, ``source_tree``). Bounded by MAX_TREE_FILES /
    MAX_TREE_BYTES (ValueError)."""
    files = total = 0
    for e in walk_folder(path, source_tree=True):
        if e.kind not in ("file", "link"):
            continue
        # a top-level entry is named "./name" (as os.path.relpath named the folder "."): the hash's text
        rel = e.rel if "/" in e.rel else os.path.join(".", e.rel)
        files += 1
        if files > MAX_TREE_FILES:
            raise ValueError(f"{path} has over {MAX_TREE_FILES} files")
        if e.kind == "link":
            yield rel, e.path, None
            continue
        st = os.stat(e.path)
        total += st.st_size
        if total > MAX_TREE_BYTES:
            raise ValueError(f"{path} holds over {MAX_TREE_BYTES} bytes")
        yield rel, e.path, st


def tree_hash(path: str) -> str:
    """Content hash of a file or a folder tree (names, modes, content; links
    by their target text, never followed), over :func:`walk_tree`."""
    h = hashlib.sha256()
    if os.path.isfile(path):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return "file:" + h.hexdigest()
    for rel, full, st in walk_tree(path):
        h.update(f"{rel}\0".encode())
        if st is None:
            h.update(b"L" + os.readlink(full).encode() + b"\0")
            continue
        h.update(f"{st.st_mode & 0o111:o}\0".encode())
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return "tree:" + h.hexdigest()
