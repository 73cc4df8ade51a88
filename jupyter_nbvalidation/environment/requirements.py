"""One check for every requirements source of a job, applied at submit.

The sources (the spec list ``podConfig.buildConfig.requirements``, else
``podConfig.buildConfig.requirementsFile``, else the file the repository
declares its environment in, found by :mod:`discovery` from the
notebook's folder up to the repository root, binder/ in place of the root's
own files: environment.yml, pylock.toml, uv.lock (exported by ``uv export``),
Pipfile(.lock), requirements.txt, pyproject.toml / setup.py) go through
:func:`collect`, which reads files safely (reading.py) and checks every line
(collector.py): options, local paths (their content hashed into the
environment's cache key, trees.py), ``${VAR}`` refused, credentials in URLs
replaced by ``***`` in everything stored or shown (credentials.py).

The snapshot a backend stores is the *display* text (flattened, absolute
local paths, credentials ``***``). The secret values never go to disk: the
process that accepted the job holds them in memory (:func:`hold`); a build
gets them through its process environment only: the requirements file it
reads has ``${NBV_SECRET_<n>}`` in place of each ``***`` (pip and uv expand
these), and the values are set in the build's environment
(:func:`for_build`). A process that does not hold them (restart, another
server took over) reads the source file again and uses it only when its
display text is exactly the snapshot's; credentials given in the spec list
cannot be recovered that way, and the build fails saying so.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, NoReturn

import jupyter_nbvalidation.environment.discovery as discovery
from jupyter_nbvalidation.core.redaction import MASK
from jupyter_nbvalidation.environment.collector import Collector
from jupyter_nbvalidation.environment.credentials import held as held_secrets
from jupyter_nbvalidation.environment.credentials import hold, placeholders, release
from jupyter_nbvalidation.environment.kinds.pyproject import declared_extras
from jupyter_nbvalidation.environment.lines import logical_lines, split_extras
from jupyter_nbvalidation.environment.model import (
    INTERPRETER_JSON,
    ORIGIN_ANNOTATION,
    SOURCE_ANNOTATION,
    SYSTEM_PACKAGES_TXT,
    Requirements,
)
from jupyter_nbvalidation.environment.reading import (
    FIELD,
    MAX_FILE_BYTES,
    OverLimit,
    RequirementsError,
    bounded,
    read_confined,
)
from jupyter_nbvalidation.verdict.environment_record import normalize

# the one door of the requirements check: what the package's other modules (and its tests) take from
# here, whether defined here or in the module of its concern
__all__ = ["CONSTRAINTS_FIELD", "EXTRAS_FIELD", "INTERPRETER_JSON", "MASK", "MAX_FILE_BYTES", "ORIGIN_ANNOTATION",
           "OverLimit", "Requirements", "RequirementsError", "SOURCE_ANNOTATION", "SYSTEM_PACKAGES_TXT", "collect",
           "for_build", "from_snapshot", "hold", "of_job", "read_confined", "release", "source_annotation"]


def collect(spec: dict[str, Any], root: str, notebook_real: str, *, system_packages: bool = False) -> Requirements:
    """The job's requirements from the source its spec names, checked
    (raises :class:`RequirementsError`), with the spec's own constraint lines
    (``podConfig.buildConfig.constraints``) after any the source has.
    ``notebook_real``: the notebook's resolved path (inside ``root``).
    ``system_packages``: the backend installs a discovered environment's apt.txt."""
    out = _collect_source(spec, root, notebook_real, system_packages)
    entries = ((spec.get("podConfig") or {}).get("buildConfig") or {}).get("constraints") or []
    if entries:
        c = Collector(root, CONSTRAINTS_FIELD, out.origin)
        c.out = out
        before = len(out.constraints)
        c.spec_list(entries, os.path.dirname(notebook_real), constraints=True)
        out.spec_constraints = len(out.constraints) - before
        if out.spec_constraints:
            out.origin = (f"{out.origin}; {out.spec_constraints} constraint"
                          f"{'s' if out.spec_constraints != 1 else ''} ({CONSTRAINTS_FIELD})")
    return out


def _collect_source(spec: dict[str, Any], root: str, notebook_real: str, system_packages: bool = False
                    ) -> Requirements:
    """The requirements of the source the spec names (the list, the file, or what
    the repository declares), checked."""
    bc = (spec.get("podConfig") or {}).get("buildConfig") or {}
    nb_dir = os.path.dirname(notebook_real)
    rel_nb_dir = os.path.dirname(spec["notebook"]["path"].strip())
    if bc.get("requirements"):
        field_name = "spec.podConfig.buildConfig.requirements"
        c = Collector(root, field_name, field_name)
        c.spec_list(bc["requirements"], nb_dir)
        return c.out
    field_name = "spec.podConfig.buildConfig.requirementsFile"
    if bc.get("requirementsFile"):
        rel = bc["requirementsFile"].strip()
        if "\x00" in rel or os.path.isabs(rel) or rel.startswith("~"):
            raise RequirementsError(field_name, f"{field_name}: {rel!r} must be a path relative to the "
                                                "notebook's folder", 400)
        # relative to the notebook's folder as the user names it (its API path)
        path = os.path.join(os.path.realpath(root), rel_nb_dir, rel)
        what = f"{field_name} {rel!r}"
        c = Collector(root, field_name, f"{rel}")
        c.file(path, what)
    else:
        return _discovered(root, rel_nb_dir, _extras(bc), system_packages=system_packages)
    c.out.source_path = path
    return c.out


CONSTRAINTS_FIELD = "spec.podConfig.buildConfig.constraints"
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
EXTRAS_FIELD = "spec.podConfig.buildConfig.extras"


def _extras(bc: Mapping[str, Any]) -> list[str]:
    """``buildConfig.extras``, each a valid extra name (PEP 685), in order, once."""
    out: list[str] = []
    for i, name in enumerate(bc.get("extras") or []):
        name = str(name).strip()
        if not _EXTRA_NAME.match(name):
            raise RequirementsError(f"{EXTRAS_FIELD}[{i}]", f"{EXTRAS_FIELD}[{i}]: {name!r} is not an extra's name "
                                                            "(letters, digits, '.', '_', '-')")
        if name not in out:
            out.append(name)
    return out


def _discovered(root: str, rel_nb_dir: str, extras: list[str] | None = None, *,
                system_packages: bool = False) -> Requirements:
    """Neither the spec list nor requirementsFile: the file the repository
    declares its environment in (discovery.discover, repo2docker's order), read
    and checked line by line like a requirements file; ``extras``
    (``buildConfig.extras``) of the project, when the environment is the project."""
    extras = extras or []
    found = discovery.discover(root, rel_nb_dir)
    if found.kind is None:
        if extras:
            raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: extras apply to the repository's own project, "
                                                  f"and none was found ({discovery.nothing_found(found)})")
        return Requirements(origin=discovery.nothing_found(found))
    python_requires = discovery.python_requirement(found, root)
    path, where, base = found.path, found.where, os.path.dirname(found.path)
    got = discovery.kind_of(found).contribute(found, root, extras)
    if extras and not got.install_project:
        _no_project_for_extras(where)
    c = Collector(root, FIELD, got.origin)
    if got.read is None:  # a requirements file
        c.file(path, where)
    else:
        c.seen_files.add(os.path.realpath(path))
        for i, (n, line) in enumerate(got.read.lines):
            label = got.read.labels[i] if got.read.labels else f"entry {i + 1}" if not n else f"line {n}"
            entry = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if "\n" in entry or "\r" in entry:
                c.fail(f"{where} {label}", "an entry is one line")
            if entry:
                c.line(entry, base, f"{where} {label}")
    if got.install_project:
        _install_project(c, base, where, extras)
    c.out.project_file = got.project_file
    c.out.supported_environments = got.supported
    apt = discovery.APT.system_packages(base, root) if system_packages else None
    if apt is not None and apt[0]:
        c.out.system_packages = apt[0]
        n = len(apt[0])
        c.out.origin = bounded(f"{c.out.origin}; {n} system package{'s' if n != 1 else ''} from {apt[1]} "
                               f"({', '.join(apt[0])})")
    skipped = discovery.not_run_here(base, system_packages=system_packages)
    if skipped:
        c.out.origin = bounded(f"{c.out.origin}; not run here: {', '.join(skipped)}")
    c.out.source_path = path
    c.out.python_requires = python_requires
    return c.out


def _no_project_for_extras(where: str) -> NoReturn:
    raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: extras apply to the repository's own project; "
                                          f"the environment here is {where}, which installs no project")


def _install_project(c: Collector, base: str, where: str, extras: list[str] | None = None) -> None:
    """The project in ``base`` installed (not editable) from its folder, with ``extras``: a local path.
    An extra the project does not declare is refused now (the installer would only warn, and the
    notebook be validated without what was asked for)."""
    if extras:
        known = declared_extras(base, c.root)
        unknown = [e for e in extras if known is not None and normalize(e) not in known]
        if unknown:
            raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: {where} declares no extra "
                                                  f"{', '.join(repr(e) for e in unknown)} (it declares: "
                                                  f"{', '.join(known or []) or 'none'})")
    try:
        c.requirement("." + (f"[{','.join(extras)}]" if extras else ""), base, where, constraints=False)
    except RequirementsError as e:  # e.g. a tree over the bounds of the cache key's hash
        raise RequirementsError(e.field, f"{e.message}; to validate without installing the project, declare "
                                         "the notebook's dependencies in a requirements.txt beside it or in "
                                         "spec.podConfig.buildConfig.requirementsFile / requirements",
                                e.status) from None


# --- the build side -----------------------------------------------------------------

def source_annotation(reqs: Requirements, spec: dict[str, Any], root: str) -> str | None:
    """What a later process needs to read the credentials again from the
    source (a file; never for the spec list): the root and the job's spec
    paths. None when there is nothing to recover."""
    if not reqs.secrets or reqs.source_path is None:
        return None
    return json.dumps({"root": os.path.realpath(root)}, separators=(",", ":"))


def from_snapshot(requirements_txt: str | None, constraints_txt: str | None, origin: str) -> Requirements:
    """The stored (display) snapshot, read back: placeholders where ``***``
    credentials are, the local paths it names (already checked at submit)."""
    out = Requirements(origin=origin)
    counter = [0]
    for text, lines, shown in ((requirements_txt, out.lines, out.display_lines),
                               (constraints_txt, out.constraints, out.display_constraints)):
        for _, line in logical_lines(text or ""):
            shown.append(line)
            lines.append(placeholders(line, counter))
            for word in line.split():
                w = word.removeprefix("file://")
                if w.startswith("/"):
                    out.local_paths.append(split_extras(w)[0])
    out.secrets = [""] * counter[0]
    return out


def for_build(job: Mapping[str, Any], reqs: Requirements) -> Requirements:
    """``reqs`` (from the snapshot) with its credential values, for the
    build: from this process's memory, else read again from the source file
    when its display text is still exactly the snapshot's. Raises
    ValueError when they cannot be had (the message says why)."""
    needed = len(reqs.secrets)
    if not needed:
        return reqs
    name = job["metadata"]["name"]
    held = held_secrets(name)
    if held is not None and len(held) == needed:
        reqs.secrets = list(held)
        return reqs
    ann = (job["metadata"].get("annotations") or {}).get(SOURCE_ANNOTATION)
    if ann:
        try:
            root = json.loads(ann)["root"]
            nb_real = os.path.join(root, job["spec"]["notebook"]["path"])
            again = collect(job["spec"], root, os.path.realpath(nb_real))
        except (ValueError, KeyError, TypeError, OSError, RequirementsError):
            again = None
        if again is not None and again.display_lines == reqs.display_lines and \
                again.display_constraints == reqs.display_constraints and len(again.secrets) == needed:
            reqs.secrets = again.secrets
            return reqs
        raise ValueError(f"The requirements ({reqs.origin}) carry index credentials, which are never stored; "
                         "the source file changed since submit (or cannot be read), so they cannot be taken "
                         "from it again. Submit the job again.")
    raise ValueError("The requirements (spec.podConfig.buildConfig.requirements) carry index credentials, which "
                     "are never stored, and only the process that accepted the job held them (it stopped, or "
                     "another server builds this job). Put them in a requirements file (read again at build "
                     "time) or submit the job again.")


def of_job(job: dict[str, Any], snapshot: str | None, constraints: str | None) -> Requirements:
    """A job's requirements from its stored snapshot (checked and flattened
    at submit, credentials shown as ***; see requirements.py). A job stored
    before the snapshot held the spec list falls back to the list, and so does
    one created around the server (kubectl) for its constraints: never ignored."""
    bc = job["spec"].get("podConfig", {}).get("buildConfig", {})
    stored = ((job.get("metadata") or {}).get("annotations") or {}).get(ORIGIN_ANNOTATION)
    if constraints is None and bc.get("constraints"):
        constraints = "".join(f"{c}\n" for c in bc["constraints"])
    if bc.get("requirements"):
        origin = "spec.podConfig.buildConfig.requirements"
        if snapshot is None:
            snapshot = "".join(f"{r}\n" for r in bc["requirements"])
    elif snapshot is not None:
        # a job stored before the origin was: today's text for the two sources it could have had
        origin = stored or bc.get("requirementsFile") or "requirements.txt beside the notebook"
    elif constraints:  # constraints alone: over the kernel's own install
        origin = stored or CONSTRAINTS_FIELD
    else:
        return Requirements(origin=stored or "no requirements declared")
    return from_snapshot(snapshot, constraints, origin)
