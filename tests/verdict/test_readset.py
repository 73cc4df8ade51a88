"""The read-set (verdict/readset.py), from a kernel's record as runner/readset.py collects it:
how each path is placed (the working copy as the root, the environment, scratch, the system,
outside) and what a later lookup holds it to. Real files; the kernels are in
tests/verdict/test_cache_property.py."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_nbvalidation.verdict.readset import describe, first_change


def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, tree, env = tmp_path / "root", tmp_path / "run" / "tree", tmp_path / "env"
    for folder in (root / "nbs", tree / "nbs", env / "dep"):
        folder.mkdir(parents=True)
    (root / "nbs" / "helper.ipynb").write_text("{}")
    (root / "nbs" / "tool.sh").write_text("#!/bin/sh\n")
    (root / "nbs" / "tool.sh").chmod(0o755)
    (root / "data.txt").write_text("1")
    (env / "dep" / "__init__.py").write_text("VALUE = 1\n")
    return root, tree, env


def record(tree: Path, env: Path, *extra: list[str]) -> dict:
    cwd = str(tree / "nbs")
    return {"cwd": cwd, "environment": [str(env)], "modules": [str(env / "dep" / "__init__.py")],
            "reads": [["f", "hel" "per.ipynb", cwd], ["f", "../data.txt", cwd], ["d", ".", cwd],
                      ["x", cwd, "./tool.sh"], ["f", "out.csv", cwd], *extra]}


def test_each_change_of_what_the_kernel_read_is_seen_and_nothing_else(tmp_path):
    root, tree, env = setup(tmp_path)
    doc = describe(record(tree, env), root=str(root), tree=str(tree), scratch=[])
    assert doc["uncacheable"] is None
    assert set(doc["files"]) == {"nbs/helper.ipynb", "data.txt", "nbs/tool.sh", "nbs/out.csv"}
    assert doc["files"]["nbs/out.csv"] == "-"  # written by the kernel in its copy: absent here, and must stay so
    assert set(doc["dirs"]) == {"nbs"} and list(doc["environment"]) == [str(env / "dep" / "__init__.py")]
    assert first_change(doc, str(root)) is None

    def changed(change, undo) -> str | None:
        change()
        try:
            return first_change(doc, str(root))
        finally:
            undo()
            assert first_change(doc, str(root)) is None

    tool, helper, data = root / "nbs" / "tool.sh", root / "nbs" / "helper.ipynb", root / "data.txt"
    assert "nbs/tool.sh" in changed(lambda: tool.chmod(0o644), lambda: tool.chmod(0o755))
    assert "nbs/helper.ipynb" in changed(lambda: helper.write_text("{ }"), lambda: helper.write_text("{}"))
    assert "data.txt" in changed(lambda: data.rename(root / "data.old"), lambda: (root / "data.old").rename(data))
    assert "out.csv" in changed(lambda: (root / "nbs" / "out.csv").write_text("x"),
                                lambda: (root / "nbs" / "out.csv").unlink())
    assert "folder nbs" in changed(lambda: (root / "nbs" / "new").mkdir(), lambda: (root / "nbs" / "new").rmdir())
    source = env / "dep" / "__init__.py"
    before = source.stat()
    assert "environment" in changed(lambda: source.write_text("VALUE = 2\n"),
                                    lambda: (source.write_text("VALUE = 1\n"),
                                             os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns)),
                                             doc["environment"].update({str(source): [before.st_size,
                                                                                      before.st_mtime_ns,
                                                                                      source.stat().st_ino]})))
    # another hard link to an environment's file (uv links every environment from its cache): not a change
    os.link(source, tmp_path / "linked-from-another-environment.py")
    assert first_change(doc, str(root)) is None
    (root / "unread.txt").write_text("never read")  # a file the kernel did not read: not a change
    assert first_change(doc, str(root)) is None
    assert first_change(doc, str(tmp_path)) is not None  # held against another root: never


def test_a_read_outside_the_root_and_its_environment_is_uncacheable_but_scratch_and_system_are_not(tmp_path):
    root, tree, env = setup(tmp_path)
    (tmp_path / "elsewhere.txt").write_text("x")
    scratch = tmp_path / "run" / "kernel-home"
    base = record(tree, env, ["f", "/etc/hostname"], ["f", "/usr/lib/os-release"], ["f", str(scratch / "x")],
                  ["d", "/proc/self"])
    doc = describe(base, root=str(root), tree=str(tree), scratch=[str(scratch)])
    assert doc["uncacheable"] is None
    outside = describe(record(tree, env, ["f", str(tmp_path / "elsewhere.txt")]), root=str(root), tree=str(tree),
                       scratch=[])
    assert str(tmp_path / "elsewhere.txt") in outside["uncacheable"]
    assert first_change(outside, str(root)) == outside["uncacheable"]
    # a program run with an argument naming a file outside: what it reads is not seen, so not cacheable
    ran = describe(record(tree, env, ["x", str(tree / "nbs"), "/bin/sh", "-c", f"cat {tmp_path / 'elsewhere.txt'}"]),
                   root=str(root), tree=str(tree), scratch=[])
    assert str(tmp_path / "elsewhere.txt") in ran["uncacheable"]
    # shown by the sandbox over its scratch /tmp: a real path, not scratch
    shown = describe(record(tree, env, ["f", str(tmp_path / "elsewhere.txt")]), root=str(root), tree=str(tree),
                     scratch=[str(tmp_path)], shown=[str(tmp_path / "elsewhere.txt")])
    assert shown["uncacheable"]
    assert describe(None, root=str(root), tree=str(tree), scratch=[])["uncacheable"]
