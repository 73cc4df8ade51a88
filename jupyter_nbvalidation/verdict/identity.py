"""The runner's identity: what of this tool, and of what it runs on, can change a
verdict, and only that. It is part of the verdict cache's key (verdict/cache.py) and
an environment record names it (``tool.sources``, verdict/environment_record.py).

It hashes, once per process:

- the runner: every ``.py`` file under ``runner/`` (it runs the notebook and writes
  the verdict);
- :data:`VERDICT_MODULES`: the modules outside ``runner/`` a verdict's judgement runs
  through (the comparison, the cell markers, ...);
- the installed distributions a run goes through: :data:`RUN_DISTRIBUTIONS` and what
  they require (extras left out), each by its name, version and the content of its
  ``RECORD`` (every file it installed, with its hash): an upgrade, or a reinstall of
  other content under the same version, gives another identity.

Nothing else of the package is in it: an edit to the CLI, the server, the engine, the
backends, the store or the docs keeps every cached verdict. The files are read by
path (this module imports nothing of the runner)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]

RUNNER_DIR = "runner"

# Beside runner/, the modules a verdict's judgement runs through (paths in the package).
# The runner imports each (runner.SHARED_MODULES), or, for spec/runner_args.py and the
# table it reads (core/spec_table.py), each backend turns the job's spec into the
# runner's arguments with it.
VERDICT_MODULES = (
    "__init__.py",               # runs first in every runner process: defers jsonschema's rfc3987 format
    #                              checker, which nbformat's validation of the notebook goes through
    "core/deferred_imports.py",  # that deferral
    "core/priority.py",          # the CPU priority the runner gives itself and the kernel: cell times, so timeouts
    "core/tasks.py",             # wait_within: how the runner's timeouts are kept
    "core/vocabulary.py",        # the verdicts, reasons and cell statuses the runner writes
    "core/spec_table.py",        # the runner options' rows (flag, form, server default) spec/runner_args.py
    #                              writes the runner's arguments from
    "spec/runner_args.py",       # the spec's comparison options, parameters and output limits as the runner's
    #                              arguments (both backends)
    "verdict/compare.py",        # the golden comparison: tolerances, one cell, the whole notebook
    "verdict/flatten.py",        # what of a cell's outputs is compared (streams merged, keys, ignored types)
    "verdict/sanitize.py",       # what is normalised away before comparing (sanitizers, timestamps, addresses)
    "verdict/markers.py",        # which cells run, may raise, are skipped or compared; the notebook's settings
    "verdict/inherited.py",      # the variables the kernel inherits from the runner (locale, time zone)
)
# What else the runner imports (runner.SHARED_MODULES) judges nothing: the version
# string, two empty package files, and the probe of the kernel's interpreter (the
# environment record, taken beside the run). tests/verdict/test_verdict_cache.py holds
# SHARED_MODULES to these two tuples.
SHARED_BUT_NOT_JUDGING = ("_version.py", "core/__init__.py", "verdict/__init__.py", "verdict/probe.py",
                          "verdict/readset.py")

# The distributions a run goes through: the runner's (nbclient drives the kernel through
# jupyter_client; nbformat reads, validates and writes the notebook) and the kernel's
# (ipykernel); with what each requires, found in the installed metadata.
RUN_DISTRIBUTIONS = ("nbclient", "nbformat", "jupyter_client", "ipykernel")

_runner_digest: str | None = None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _required(dist: importlib.metadata.Distribution) -> list[str]:
    """The names ``dist`` requires when installed without extras: every requirement
    line but those whose marker names an ``extra``. Other markers (``python_version``,
    ``sys_platform``) are not evaluated: such a requirement counts, as not installed
    when it is not."""
    names = []
    for line in dist.requires or ():
        requirement, _, marker = line.partition(";")
        m = _NAME.match(requirement)
        if m and not re.search(r"\bextra\b", marker):
            names.append(m.group(1))
    return names


def run_distributions() -> list[tuple[str, importlib.metadata.Distribution | None]]:
    """RUN_DISTRIBUTIONS and, transitively, what they require: (canonical name, the
    installed distribution, None when not installed), by name."""
    found: dict[str, importlib.metadata.Distribution | None] = {}
    todo = list(RUN_DISTRIBUTIONS)
    while todo:
        name = _canonical(todo.pop())
        if name in found:
            continue
        try:
            dist: importlib.metadata.Distribution | None = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            dist = None
        found[name] = dist
        if dist is not None:
            todo.extend(_required(dist))
    return sorted(found.items())


def _file_digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest().encode()
    except OSError:
        return b"-"


def runner_identity() -> str:
    """The digest of the runner, VERDICT_MODULES and the run's distributions (see above)."""
    global _runner_digest
    if _runner_digest is None:
        h = hashlib.sha256()
        runner = sorted((_PKG / RUNNER_DIR).rglob("*.py"))
        for p in [*runner, *(_PKG / m for m in VERDICT_MODULES)]:
            h.update(p.relative_to(_PKG).as_posix().encode() + b"\0" + _file_digest(p) + b"\0")
        for name, dist in run_distributions():
            if dist is None:
                h.update(f"{name}=-\0".encode())
                continue
            record = dist.read_text("RECORD")
            h.update(f"{name}={dist.version}\0".encode())
            h.update(hashlib.sha256(record.encode()).hexdigest().encode() if record is not None else b"-")
            h.update(b"\0")
        _runner_digest = h.hexdigest()
    return _runner_digest
