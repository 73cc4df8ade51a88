"""The one folder walk (core/folders.py) as its two callers read it: a notebook's folder (the
verdict key, the kernel's copy) and a package's source tree (trees.py: the environment's cache
key, the archive that travels with a job), each leaving out what it always did."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_nbvalidation.core.folders import EXCLUDED_DIRS, walk_folder
from jupyter_nbvalidation.environment.trees import tree_hash, walk_tree


def _tree(root: Path) -> None:
    for rel in ["a.py", "a.pyc", "sub/b.py", "sub/build/kept.txt", "build/x", "dist/y", "pkg.egg-info/PKG-INFO",
                ".eggs/e", ".venv/lib/v", "venv/pyvenv.cfg", "venv/lib/w", "node_modules/m/index.js", ".bzr/branch",
                ".git/HEAD", "__pycache__/a.cpython-311.pyc", ".hidden/h"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.symlink("a.py", root / "link.py")
    os.symlink("sub", root / "sublink")


def test_a_source_tree_leaves_out_what_a_build_writes_and_keeps_what_a_build_reads(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = [(rel, st is None) for rel, _, st in walk_tree(str(tmp_path))]
    assert got == [
        ("./a.py", False), ("./link.py", True), ("./sublink", True),
        (".bzr/branch", False), (".hidden/h", False), ("node_modules/m/index.js", False),
        ("sub/b.py", False), ("sub/build/kept.txt", False)]


def test_a_notebook_folder_leaves_out_the_one_list_and_follows_links_inside(tmp_path: Path) -> None:
    _tree(tmp_path)
    entries = {e.rel: e.kind for e in walk_folder(tmp_path)}
    assert {".bzr", "node_modules", ".git", "__pycache__"} <= EXCLUDED_DIRS  # venv/: a virtual environment
    assert not any(rel.split("/")[0] in EXCLUDED_DIRS | {"venv"} for rel in entries)
    for kept in ("build/x", "dist/y", "pkg.egg-info/PKG-INFO", ".eggs/e", ".venv/lib/v", "a.pyc", "sub/build/kept.txt"):
        assert entries[kept] == "file", kept
    assert entries["link.py"] == "file" and entries["sublink"] == "again"  # followed: inside the folder


def test_the_tree_hash_follows_content_not_build_artefacts(tmp_path: Path) -> None:
    _tree(tmp_path)
    before = tree_hash(str(tmp_path))
    (tmp_path / "build" / "lib").mkdir()
    (tmp_path / "build" / "lib" / "a.py").write_text("built")
    (tmp_path / "other.egg-info").mkdir()
    (tmp_path / "a.cpython-311.pyc").write_text("bytecode")
    assert tree_hash(str(tmp_path)) == before
    (tmp_path / "node_modules" / "m" / "index.js").write_text("changed")
    assert tree_hash(str(tmp_path)) != before
