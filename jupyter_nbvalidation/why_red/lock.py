"""Pin what passed (issue 22): a job's environment record as a requirements file of
exact pins, and as constraint lines.

Pure functions of a record (environment_record.py), no I/O:

- :func:`lock_text` is what ``GET /jobs/{name}/lock``, ``jupyter nbvalidation lock``
  and the lab's "Download the lock" give: every distribution of the environment the
  job's kernel ran in at its exact version (``name==version``; a VCS commit, URL or
  local path as such), after the option lines of the requirements it was built from
  (``--find-links``, ``--index-url``: where those versions are found), with a header
  saying whose it is. ``pip install -r`` and ``uv pip install -r`` take it.
- :func:`constraint_lines` is what ``--constraints-from-last-success`` puts in
  ``spec.podConfig.buildConfig.constraints``: the ``name==version`` pins of the
  distributions that came from an index (a constraint cannot be a path, and pip
  refuses URL constraints), so a new build keeps every version the last success had
  wherever the requirements still allow it, and installs nothing they do not ask for.

A record taken from an interpreter the job did not build (``buildConfig.enabled``
false) has no lock: its distributions are whatever the server's interpreter holds,
not what the notebook declared (:class:`NoLock`). Credentials in URLs are ``***`` in
the record already; a line that carries one is left as a comment, never half-usable.
"""

from __future__ import annotations

from typing import Any, Mapping

from jupyter_nbvalidation.core.redaction import MASK
from jupyter_nbvalidation.why_red.cause_search import option_lines, requirement_line


class NoLock(Exception):
    """The record cannot be pinned (the message says why)."""


def _check(record: Mapping[str, Any]) -> None:
    if record.get("error"):
        raise NoLock(f"its environment record is incomplete ({record['error']})")
    if (record.get("environment") or {}).get("kind") != "built":
        raise NoLock("it ran in an interpreter it did not build (podConfig.buildConfig.enabled false): "
                     "its packages are the server's, not declared ones")
    if record.get("truncated"):
        raise NoLock(f"its environment record kept {record['truncated'].get('kept')} of "
                     f"{record['truncated'].get('distributions')} distributions")


def lock_text(job: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    """The exact pins of the job's environment as a requirements file (raises NoLock)."""
    _check(record)
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    py = record.get("python") or {}
    when = status.get("completionTime") or record.get("takenAt") or ""
    head = [f"# The exact environment job {meta.get('name', '?')} validated "
            f"{(job.get('spec') or {}).get('notebook', {}).get('path', '?')} in "
            f"({status.get('phase') or 'not ended'}{', ' + when if when else ''}).",
            f"# Python {py.get('version', '?')} ({py.get('implementation', '?')}) on {py.get('platform', '?')}.",
            "# Written by jupyter-nbvalidation; install with: uv pip install -r THIS-FILE (or pip install -r)"]
    declared = [str(x) for x in ((record.get("environment") or {}).get("requirements") or [])]
    body: list[str] = []
    for line in option_lines(declared):
        body.append(f"# {line}  (its credentials are not kept)" if MASK in line else line)
    notes = []
    for dist in record.get("distributions") or []:
        line, note = requirement_line(dist)
        if MASK in line:
            body.append(f"# {line}  (its credentials are not kept: give the URL yourself)")
        else:
            body.append(line)
        if note:
            notes.append(f"# note: {note}")
    return "\n".join(head + body + notes) + "\n"


def constraint_lines(record: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(``name==version`` lines of the distributions from an index, the names of those
    left out because a constraint cannot say where they came from). Raises NoLock."""
    _check(record)
    lines, left_out = [], []
    for dist in record.get("distributions") or []:
        if (dist.get("source") or {}).get("kind", "index") == "index" and dist.get("version"):
            lines.append(f"{dist['name']}=={dist['version']}")
        else:
            left_out.append(str(dist.get("name")))
    return lines, left_out
