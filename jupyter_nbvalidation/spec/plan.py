"""The validation plan: what a job asks for, decided once, carried out by either backend.

The engine computes a job's :class:`ValidationPlan` from its spec and the
input snapshot stored at submit (:class:`Snapshot`, read back through
``Backend.read_snapshot``) when it first needs it, and hands the same plan to
every backend call (``prepare``, ``ensure_build``, ``ensure_validation``). A
backend only carries it out: it never resolves requirements, reads a timeout
default or turns a spec into runner arguments itself (docs/architecture.md,
"The validation plan"). The plan is deterministic: an engine that takes over
after a restart computes the same one from the same job and snapshot.

Nothing in here does I/O except :func:`make_plan` hashing the local paths a
requirements file names (their content is part of the environment's
identity): call it off the event loop.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from typing import Any, Mapping

import jupyter_nbvalidation.environment.local_sources as local_sources
import jupyter_nbvalidation.environment.requirements as reqmod
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION, WORKDIR_ANNOTATION, build_enabled, parse_duration
from jupyter_nbvalidation.spec.runner_args import runner_args

NOTEBOOK = "notebook.ipynb"
GOLDEN = "golden.ipynb"
REQUIREMENTS_TXT = "requirements.txt"
CONSTRAINTS_TXT = "constraints.txt"
INPUTS_PREFIX = "inputs/"  # spec.inputFiles in a snapshot: inputs/<path relative to the notebook's folder>


@dataclass(frozen=True)
class Snapshot:
    """What a backend stored at submit, as the plan needs it: the file names,
    the requirements texts, and the input files as (storage key, path
    relative to the notebook's folder)."""

    names: frozenset[str]
    requirements_txt: str | None = None
    constraints_txt: str | None = None
    input_files: tuple[tuple[str, str], ...] = ()
    local_paths: bytes | None = None  # local_sources.ARCHIVE: the requirements' local paths, packed at submit
    system_packages_txt: str | None = None  # apt.txt's packages, one a line (requirements.SYSTEM_PACKAGES_TXT)
    interpreter_json: str | None = None  # what the repository asks of the interpreter (requirements.INTERPRETER_JSON)


@dataclass(frozen=True)
class Timeouts:
    """Seconds: the spec's value, else the server's default."""

    build: float
    validation: float
    cell: float


def timeouts(spec: Mapping[str, Any], *, build_timeout: float, validation_timeout: float,
             cell_timeout: float) -> Timeouts:
    """A job's phase and cell timeouts (``podConfig.buildConfig.timeout``,
    ``timeout``, ``cellTimeout`` over the defaults)."""
    bc = (spec.get("podConfig") or {}).get("buildConfig") or {}
    return Timeouts(
        build=parse_duration(bc["timeout"]) if bc.get("timeout") else float(build_timeout),
        validation=parse_duration(spec["timeout"]) if spec.get("timeout") else float(validation_timeout),
        cell=parse_duration(spec["cellTimeout"]) if spec.get("cellTimeout") else float(cell_timeout),
    )


@dataclass(frozen=True)
class ValidationPlan:
    """Everything a backend needs to build and validate one job.

    ``requirements`` is the snapshot's (display form: a credential is ``***``,
    its value only a placeholder; a build gets the values through
    ``requirements.for_build`` on a copy). ``requirements_key`` identifies
    what the environment must contain (the requirement lines, constraints and
    the content of every local path they name); a backend adds where it
    builds (interpreter, base image). ``runner_args`` is what the spec asks of
    the runner (runner_args.runner_args); a backend adds only locations (the
    notebook, the golden notebook, result paths, the kernel's interpreter)."""

    uid: str
    build: bool
    golden: bool
    requirements: reqmod.Requirements
    requirements_key: str
    timeouts: Timeouts
    runner_args: tuple[str, ...]
    kernel_env: tuple[tuple[str, str], ...]
    input_files: tuple[tuple[str, str], ...]
    # podConfig.credentials: names of secrets whose values the backend reads at the run (never here)
    credentials: tuple[str, ...] = ()

    @property
    def detected(self) -> str:
        """A sentence on what was detected: "2 requirements from requirements.txt
        beside the notebook", or, with none, says so (never "0 requirements from
        no requirements declared")."""
        return requirements_sentence(self.requirements.count, self.requirements.origin)

    @property
    def build_timeout(self) -> float:
        return self.timeouts.build

    @property
    def validation_timeout(self) -> float:
        return self.timeouts.validation

    @property
    def cell_timeout(self) -> float:
        return self.timeouts.cell


def requirements_sentence(count: int, origin: str | None) -> str:
    """``"2 requirements from requirements.txt beside the notebook"``, ``"1
    requirement from pyproject.toml at the repository root (project pint,
    installed from .)"``; with none, says so, and where it looked when the
    origin says ("no dependencies declared: looked in notebooks, . (repository
    root)") or which file gave nothing to install."""
    kernel_only = "(the environment gets the kernel only)"
    if count == 0:
        if origin and origin.startswith("no dependencies declared"):
            return f"{origin} {kernel_only}"
        if origin and origin not in ("no requirements declared", "spec.podConfig.buildConfig.requirements"):
            return f"no requirements to install from {origin} {kernel_only}"
        return f"no requirements declared {kernel_only}"
    return f"{count} requirement{'' if count == 1 else 's'}" + (f" from {origin}" if origin else "")


def requirements_key(reqs: reqmod.Requirements) -> str:
    """The identity of a set of requirements (never a secret: display lines
    only, plus the content hash of each local path)."""
    material = reqs.cache_key_material()
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def requirements_of(job: Mapping[str, Any], snapshot: Snapshot) -> reqmod.Requirements:
    """A job's requirements, from its snapshot (checked and flattened at
    submit; requirements.of_job): the one place a stored job's requirements
    are read back."""
    reqs = reqmod.of_job(dict(job), snapshot.requirements_txt, snapshot.constraints_txt)
    if snapshot.system_packages_txt:
        reqs.system_packages = snapshot.system_packages_txt.split()
    if snapshot.interpreter_json:
        try:
            reqs.want_interpreter(json.loads(snapshot.interpreter_json))
        except (ValueError, AttributeError) as e:
            raise InputRejected(f"{reqmod.INTERPRETER_JSON} stored with this job cannot be read: {e}",
                                "spec.podConfig.buildConfig.requirementsFile") from None
    if snapshot.local_paths is not None:
        try:
            reqs.packed = local_sources.read(snapshot.local_paths)
        except (OSError, ValueError, KeyError, tarfile.TarError) as e:
            raise InputRejected(f"The requirements' local paths stored with this job ({local_sources.ARCHIVE}) "
                                f"cannot be read: {e}", "spec.podConfig.buildConfig.requirements") from None
    return reqs


def make_plan(job: Mapping[str, Any], snapshot: Snapshot, *, build_timeout: float, validation_timeout: float,
              cell_timeout: float) -> ValidationPlan:
    """The plan of ``job`` from its stored ``snapshot``. Raises
    :class:`errors.InputRejected` naming the field when the snapshot cannot be
    used (a file missing, a local path that cannot be hashed). Hashes local
    paths: not on the event loop."""
    spec = job["spec"]
    if NOTEBOOK not in snapshot.names:
        raise InputRejected("The notebook snapshot of this job has no notebook.ipynb.", "spec.notebook.path")
    golden = bool(spec.get("goldenNotebook"))
    if golden and GOLDEN not in snapshot.names:
        raise InputRejected("The snapshot has no golden notebook.", "spec.goldenNotebook.path")
    reqs = requirements_of(job, snapshot)
    try:
        key = requirements_key(reqs)
    except (OSError, ValueError) as e:
        raise InputRejected(f"A local path of the requirements cannot be hashed for the cache key: {e}",
                            "spec.podConfig.buildConfig.requirements") from None
    limits = timeouts(spec, build_timeout=build_timeout, validation_timeout=validation_timeout,
                      cell_timeout=cell_timeout)
    env = (spec.get("podConfig") or {}).get("env") or []
    return ValidationPlan(
        uid=job["metadata"]["uid"],
        build=build_enabled(dict(spec)),
        golden=golden,
        requirements=reqs,
        requirements_key=key,
        timeouts=limits,
        runner_args=tuple(runner_args(spec, {"timeout": limits.validation, "cellTimeout": limits.cell})),
        kernel_env=tuple((e["name"], e.get("value", "")) for e in env),
        input_files=tuple(snapshot.input_files),
        credentials=tuple((spec.get("podConfig") or {}).get("credentials") or ()),
    )


def snapshot_from_files(names: Mapping[str, Any] | frozenset[str], read: Any) -> Snapshot:
    """A :class:`Snapshot` from the stored file names and ``read(name) ->
    str | None`` (the requirements texts). Input files are the names under
    ``inputs/``."""
    keys = frozenset(names)
    inputs = tuple(sorted((k, k[len(INPUTS_PREFIX):]) for k in keys if k.startswith(INPUTS_PREFIX)))
    return Snapshot(names=keys, requirements_txt=read(REQUIREMENTS_TXT) if REQUIREMENTS_TXT in keys else None,
                    constraints_txt=read(CONSTRAINTS_TXT) if CONSTRAINTS_TXT in keys else None,
                    system_packages_txt=(read(reqmod.SYSTEM_PACKAGES_TXT) if reqmod.SYSTEM_PACKAGES_TXT in keys
                                         else None),
                    interpreter_json=read(reqmod.INTERPRETER_JSON) if reqmod.INTERPRETER_JSON in keys else None,
                    input_files=inputs)


_MISSING_PATH = re.compile(r"No such file or directory: (['\"])(.+)\1\s*$")


def missing_file_hint(job: Mapping[str, Any], result: Mapping[str, Any], *, folder_in_snapshot: bool,
                      input_files: int = 0) -> str | None:
    """What travelled with a job, when its failing cell raised ``FileNotFoundError``
    for a relative path (a file beside the notebook that did not come along), as a
    clause for the job's message; None otherwise. ``folder_in_snapshot``: the
    backend carries the notebook's folder in the job's snapshot (Kubernetes: that
    folder and below only), else it copies it when the run starts, the levels above
    read through (local); ``input_files``: how many files the snapshot holds."""
    failed = result.get("failedCellIndex")
    name = message = None
    for entry in result.get("results") or []:
        if entry.get("cellIndex") == failed:
            name, message = entry.get("errorName"), entry.get("errorMessage")
    if name is None and isinstance(result.get("error"), Mapping):  # a termination summary
        name, message = result["error"].get("name"), result["error"].get("message")
    if failed is None or name != "FileNotFoundError" or not isinstance(message, str):
        return None
    m = _MISSING_PATH.search(message.strip().splitlines()[-1] if message.strip() else "")
    if m is None or m.group(2).startswith(("/", "~")):
        return None
    path = m.group(2)
    spec = job.get("spec") or {}
    patterns = [str(p) for p in spec.get("inputFiles") or []]
    if patterns:
        named = ", ".join(patterns[:5]) + (f" and {len(patterns) - 5} more" if len(patterns) > 5 else "")
        return (f"'{path}' is relative to the kernel's working folder, which holds the notebook and only the files "
                f"spec.inputFiles named ({named}: {input_files} file{'' if input_files == 1 else 's'}, read at "
                f"submit); add '{path}' to inputFiles if the notebook reads it")
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    folder, root = annotations.get(WORKDIR_ANNOTATION), annotations.get(ROOT_ANNOTATION)
    shown = "the notebook's folder"
    if folder and root and (folder == root or folder.startswith(root.rstrip("/") + "/")):
        shown += f" ({folder[len(root):].strip('/') or 'the server root'})"
    if folder_in_snapshot:
        return (f"'{path}' is relative to the kernel's working folder, which holds {shown} and everything below it "
                f"as it was at submit ({input_files} file{'' if input_files == 1 else 's'}); '{path}' was not "
                "among them, and nothing above that folder travels: keep the file beside the notebook or "
                "name it in spec.inputFiles")
    return (f"'{path}' is relative to the kernel's working folder, a copy of {shown} made when the run started "
            f"(the levels above it read through); '{path}' was not there")
