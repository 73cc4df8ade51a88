"""What changed since a notebook's last success (issue 22): a structured summary of one job
against the newest earlier Succeeded job of the same notebook, from what both stored —
their snapshots (the notebook, the golden copy, the requirements, the input files), their
specs and their environment records (environment_record.py).

Pure: the service finds the two jobs and reads their files; nothing here does I/O. The
summary names cells as JupyterLab numbers them ("Cell 3" = the third cell, counting every
cell), packages by their normalized names, and says "no cell changed" when none did: the
common case of a notebook broken by drift.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

from jupyter_nbvalidation.verdict.environment_record import normalize

MAX_LISTED = 50  # cells, packages, lines, files named per kind (counts stay whole)
SPEC_IGNORED = ("notebook",)  # the same notebook by definition

J = TypeVar("J", bound=Mapping[str, Any])


def newest_in_phase(jobs: Iterable[J], phase: str, *, after: str | None = None,
                    keep: Callable[[J], bool] = lambda job: True) -> J | None:
    """The one finder of a notebook's last success (or last failure): the first of ``jobs``
    (one notebook's, newest first) that ended in ``phase`` and that ``keep`` accepts; with
    ``after``, only among the jobs listed after the one of that name (older than it), and
    None when that job is not among them. The service's "since the last success" (over its
    store's pages), the CLI's ``lock`` and ``--constraints-from-last-success`` and the
    bisect search's newest failure (over a client's listing) all find it here."""
    seen = after is None
    for job in jobs:
        if not seen:
            seen = job["metadata"]["name"] == after
        elif (job.get("status") or {}).get("phase") == phase and keep(job):
            return job
    return None


@dataclass
class Side:
    """One job as the comparison reads it."""

    job: Mapping[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)  # snapshot names -> content
    record: dict[str, Any] | None = None  # its environment record


def _cells(notebook: bytes | None) -> list[str] | None:
    if notebook is None:
        return None
    try:
        doc = json.loads(notebook)
    except ValueError:
        return None
    out = []
    for cell in doc.get("cells") or []:
        src = cell.get("source", "")
        text = "".join(src) if isinstance(src, list) else str(src)
        out.append(f"{cell.get('cell_type', '')}\0{text}")
    return out


def cell_changes(before: bytes | None, after: bytes | None) -> dict[str, Any] | None:
    """Cells added, removed (numbered as they were) and edited (numbered as they are now)."""
    old, new = _cells(before), _cells(after)
    if old is None or new is None:
        return None
    added: list[int] = []
    removed: list[int] = []
    edited: list[int] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op == "insert":
            added += range(j1 + 1, j2 + 1)
        elif op == "delete":
            removed += range(i1 + 1, i2 + 1)
        elif op == "replace":
            paired = min(i2 - i1, j2 - j1)
            edited += range(j1 + 1, j1 + paired + 1)
            added += range(j1 + paired + 1, j2 + 1)
            removed += range(i1 + paired + 1, i2 + 1)
    return {"added": added[:MAX_LISTED], "removed": removed[:MAX_LISTED], "edited": edited[:MAX_LISTED],
            "changed": bool(added or removed or edited)}


def _lines(text: bytes | None) -> list[str]:
    if not text:
        return []
    return [ln.strip() for ln in text.decode("utf-8", "replace").splitlines() if ln.strip()]


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _version_key(v: str) -> Any:
    try:
        from packaging.version import (
            Version,  # deferred: start-up time (packaging's version parser, only when versions are compared)
        )

        return Version(v)
    except Exception:
        return None


def package_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """Distributions added, removed, upgraded, downgraded (or changed, when the versions
    do not compare), and a change of source at the same version (a local path's content)."""
    if not before or not after or before.get("error") or after.get("error"):
        return None

    def table(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {normalize(d["name"]): d for d in rec.get("distributions") or [] if d.get("name")}

    old, new = table(before), table(after)
    out: dict[str, list[Any]] = {"added": [], "removed": [], "upgraded": [], "downgraded": [], "changed": []}
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None and b is not None:
            out["added"].append({"name": b["name"], "version": b["version"]})
        elif b is None and a is not None:
            out["removed"].append({"name": a["name"], "version": a["version"]})
        elif a is not None and b is not None:
            if a["version"] != b["version"]:
                va, vb = _version_key(a["version"]), _version_key(b["version"])
                kind = "changed" if va is None or vb is None else ("upgraded" if vb > va else "downgraded")
                out[kind].append({"name": b["name"], "from": a["version"], "to": b["version"]})
            elif (a.get("source") or {}) != (b.get("source") or {}):
                out["changed"].append({"name": b["name"], "from": a["version"], "to": b["version"],
                                       "source": "its source changed (same version)"})
    counts = {k: len(v) for k, v in out.items()}
    listed: dict[str, Any] = {k: v[:MAX_LISTED] for k, v in out.items()}
    listed["counts"] = counts
    listed["changedAny"] = any(counts.values())
    return listed


def python_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, str] | None:
    if not before or not after or before.get("error") or after.get("error"):
        return None
    a, b = before.get("python") or {}, after.get("python") or {}
    fa = f"{a.get('implementation', '')} {a.get('version', '')}".strip()
    fb = f"{b.get('implementation', '')} {b.get('version', '')}".strip()
    return {"from": fa, "to": fb} if fa != fb else None


def base_image_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, str] | None:
    """The base image a built image came from (Kubernetes: by digest), when it moved."""
    a = ((before or {}).get("environment") or {}).get("baseImage")
    b = ((after or {}).get("environment") or {}).get("baseImage")
    return {"from": a, "to": b} if a and b and a != b else None


def summarize(before: Side, after: Side, commits: dict[str, Any] | None = None) -> dict[str, Any]:
    """The structured summary of ``after`` against ``before`` (its last success); ``commits``:
    for a notebook from git, the commits between the two (service.git_fetch.GitCache.log)."""
    req_old, req_new = _lines(before.files.get("requirements.txt")), _lines(after.files.get("requirements.txt"))
    req_diff = [f"-{ln}" for ln in req_old if ln not in req_new] + [f"+{ln}" for ln in req_new if ln not in req_old]
    inputs_old = {k: _digest(v) for k, v in before.files.items() if k.startswith("inputs/")}
    inputs_new = {k: _digest(v) for k, v in after.files.items() if k.startswith("inputs/")}
    inputs = {"added": sorted(k[len("inputs/"):] for k in set(inputs_new) - set(inputs_old))[:MAX_LISTED],
              "removed": sorted(k[len("inputs/"):] for k in set(inputs_old) - set(inputs_new))[:MAX_LISTED],
              "edited": sorted(k[len("inputs/"):] for k in set(inputs_old) & set(inputs_new)
                               if inputs_old[k] != inputs_new[k])[:MAX_LISTED]}
    spec_a = {k: v for k, v in (before.job.get("spec") or {}).items() if k not in SPEC_IGNORED}
    spec_b = {k: v for k, v in (after.job.get("spec") or {}).items() if k not in SPEC_IGNORED}
    env_a = ((before.record or {}).get("environment") or {}).get("key")
    env_b = ((after.record or {}).get("environment") or {}).get("key")
    summary: dict[str, Any] = {
        "since": {"name": before.job["metadata"]["name"],
                  "completionTime": ((before.job.get("status") or {}).get("completionTime")
                                     or before.job["metadata"].get("creationTimestamp"))},
        "cells": cell_changes(before.files.get("notebook.ipynb"), after.files.get("notebook.ipynb")),
        "golden": _digest(before.files.get("golden.ipynb")) != _digest(after.files.get("golden.ipynb")),
        "requirements": {"changed": bool(req_diff), "lines": req_diff[:MAX_LISTED]},
        "inputFiles": {**inputs, "changed": any(inputs.values())},
        "spec": sorted(k for k in set(spec_a) | set(spec_b) if spec_a.get(k) != spec_b.get(k)),
        "packages": package_changes(before.record, after.record),
        "python": python_change(before.record, after.record),
        "baseImage": base_image_change(before.record, after.record),
        "environmentChanged": None if env_a is None or env_b is None else env_a != env_b,
        "commits": commits,
    }
    summary["sentence"] = sentence(summary)
    return summary


def sentence(summary: dict[str, Any]) -> str:
    """One line: "pandas 2.2.3 → 3.0.0, numpy 2.1 → 2.2; no cell changed"."""
    parts: list[str] = []
    commits = summary.get("commits")
    if commits:
        parts.append(commit_phrase(commits))
    pk = summary.get("packages")
    if pk:
        moves = [f"{d['name']} {d['from']} → {d['to']}" for kind in ("upgraded", "downgraded", "changed")
                 for d in pk[kind]]
        moves += [f"+{d['name']} {d['version']}" for d in pk["added"]]
        moves += [f"-{d['name']} {d['version']}" for d in pk["removed"]]
        total = sum(pk["counts"].values())
        if moves:
            shown = ", ".join(moves[:6])
            parts.append(shown + (f" (+{total - 6} more package changes)" if total > 6 else ""))
    if summary.get("python"):
        parts.append(f"Python {summary['python']['from']} → {summary['python']['to']}")
    if summary.get("baseImage"):
        parts.append(f"base image {summary['baseImage']['from']} → {summary['baseImage']['to']}")
    if summary["requirements"]["changed"]:
        parts.append("requirements changed (" + ", ".join(summary["requirements"]["lines"][:4]) + ")")
    if summary["golden"]:
        parts.append("the golden notebook changed")
    if summary["inputFiles"]["changed"]:
        parts.append("input files changed")
    if summary["spec"]:
        parts.append("options changed (" + ", ".join(summary["spec"]) + ")")
    cells = summary.get("cells")
    if cells is None:
        parts.append("cells not compared (a snapshot is gone)")
    elif not cells["changed"]:
        parts.append("no cell changed")
    else:
        bits = []
        for kind in ("edited", "added", "removed"):
            if cells[kind]:
                bits.append(f"{kind} {_cell_list(cells[kind])}")
        parts.append("cells " + "; ".join(bits))
    if pk is None and summary.get("python") is None:
        parts.append("environments not compared (no record of one)")
    elif pk is not None and not pk["changedAny"] and not summary.get("python"):
        parts.append("same packages")
    return "; ".join(parts)


def commit_phrase(commits: dict[str, Any]) -> str:
    """"2 commits (a1b2c3d "Plot in log scale", 9f8e7d6 "Bump data"), changing nb/report.ipynb"."""
    count = commits.get("count") or 0
    if not count:
        return "same commit"
    shown = [f"{c['commit'][:7]} \"{_clip(c['subject'])}\"" for c in (commits.get("items") or [])[:3]]
    text = f"{count} commit{'s' if count != 1 else ''} ({', '.join(shown)}{', …' if count > len(shown) else ''})"
    files = commits.get("files") or []
    text += (", changing " + ", ".join(files[:4]) + (" …" if len(files) > 4 else "")) if files \
        else ", none changing the notebook's folder"
    if commits.get("ancestor") is False:
        text += " (the last success's commit is not an ancestor: history was rewritten)"
    return text


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _cell_list(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:8])
    return shown + (" …" if len(numbers) > 8 else "")
