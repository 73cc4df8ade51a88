"""``environment.yml`` (``environment.yaml``): conda's environment file, read as pip
requirements. Its ``pip:`` section as requirement lines; its conda dependencies by
their PyPI name where that is the same project (``numpy=1.26`` becomes
``numpy==1.26.*``, ``numpy>=1.2`` stays, a build string is dropped,
:data:`CONDA_RENAMED` names the few that differ); ``python`` and ``pip`` are not
installed (a ``python`` version is what the repository asks of the interpreter);
conda-only packages (:data:`CONDA_ONLY`, :data:`CONDA_ONLY_PREFIXES`) are not
installed and are named in the origin. This is not conda: channels are ignored and
nothing is installed from them."""

from __future__ import annotations

import re

import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations (types-PyYAML is not installed)

from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read, from_lines
from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, read_text

# conda packages that are not Python packages on PyPI (or are another project
# there): never installed, named in the origin. Exact names, then prefixes.
CONDA_ONLY = frozenset({
    "cudatoolkit", "cuda-toolkit", "cudnn", "nccl", "cuda", "cuda-version", "nodejs", "yarn",
    "gcc", "gxx", "gfortran", "clang", "compilers", "c-compiler", "cxx-compiler", "fortran-compiler", "make",
    "git", "openjdk", "r", "r-base", "mkl", "openblas", "blas", "libblas", "ffmpeg", "graphviz", "pandoc",
    "openssl", "ca-certificates", "zlib", "xz", "sqlite", "hdf5", "gdal", "proj", "geos", "nb_conda_kernels",
    "conda", "mamba",
})
CONDA_ONLY_PREFIXES = ("r-", "lib", "cuda-", "_")
# conda name -> PyPI name, where the same project is named otherwise on PyPI
CONDA_RENAMED = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
    "msgpack-python": "msgpack",
    "pytables": "tables",
    "python-graphviz": "graphviz",
    "py-opencv": "opencv-python",
}
_DROPPED = frozenset({"python", "pip"})
_CONDA_SPEC = re.compile(r"^(?:[A-Za-z0-9_./:-]+::)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


def conda_to_pip(spec: str) -> str | None:
    """A conda match spec as a pip requirement (None: dropped or conda-only;
    the caller tells which with :func:`conda_only`). Raises ValueError for a
    spec pip cannot express."""
    m = _CONDA_SPEC.match(spec.strip())
    if not m:
        raise ValueError("is not a conda package spec")
    name, rest = m.group(1).lower(), m.group(2).strip()
    if name in _DROPPED or conda_only(name):
        return None
    name = CONDA_RENAMED.get(name, name)
    if not rest:
        return name
    if "|" in rest:
        raise ValueError("has version alternatives (|), which pip cannot express")
    if rest[0] not in "=<>!~":  # "numpy 1.26" or "numpy 1.26 py311_0": version [build]
        rest = "=" + rest
    version = rest.split()[0]
    if version.startswith("=") and not version.startswith("=="):  # =1.26[=build]: 1.26.*
        v = version[1:].split("=")[0]
        return f"{name}=={v}" if v.endswith("*") else f"{name}=={v}.*"
    if version.startswith("=="):  # ==1.26[=build]
        return f"{name}=={version[2:].split('=')[0]}"
    return f"{name}{version}"


def conda_only(name: str) -> bool:
    name = name.lower()
    return name in CONDA_ONLY or name.startswith(CONDA_ONLY_PREFIXES)


def read_environment_yml(path: str, root: str, what: str) -> Read:
    text = read_text(path, root, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise RequirementsError(FIELD, f"{what}: is not valid YAML: {problem}{at}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RequirementsError(FIELD, f"{what}: is not a mapping (name, channels, dependencies)")
    deps = data.get("dependencies") or []
    if not isinstance(deps, list):
        raise RequirementsError(FIELD, f"{what}: dependencies is not a list")
    lines: list[tuple[int, str]] = []
    pip_lines: list[tuple[int, str]] = []
    skipped: list[str] = []
    python: str | None = None
    conda = 0
    has_pip = False
    for i, dep in enumerate(deps):
        where = f"{what}: dependencies[{i}]"
        if isinstance(dep, dict) and set(dep) == {"pip"}:
            has_pip = True
            entries = dep["pip"] or []
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                raise RequirementsError(FIELD, f"{where}: pip is not a list of requirement lines")
            pip_lines += [(0, e) for e in entries]
            continue
        if isinstance(dep, (int, float)) and not isinstance(dep, bool):
            dep = str(dep)
        if not isinstance(dep, str):
            raise RequirementsError(FIELD, f"{where}: is neither a package spec nor a pip section")
        try:
            req = conda_to_pip(dep)
        except ValueError as e:
            raise RequirementsError(FIELD, f"{where}: {dep!r} {e}") from None
        if req is None:
            name = _CONDA_SPEC.match(dep.strip())
            if name and conda_only(name.group(1)):
                skipped.append(name.group(1))
            elif name and name.group(1).lower() == "python" and name.group(2).strip():
                try:  # conda's match spec for python, read as pip would read it of a package
                    python = conda_to_pip("x " + name.group(2).strip())[1:].strip()  # type: ignore[index]
                except ValueError as e:
                    raise RequirementsError(FIELD, f"{where}: {dep!r} {e}") from None
            continue
        lines.append((0, req))
        conda += 1
    parts = []
    if has_pip:
        parts.append("pip section")
    parts.append(f"{conda} conda package{'' if conda == 1 else 's'}")
    detail = " and ".join(parts)
    if skipped:
        detail += f"; not installed (conda-only): {', '.join(skipped)}"
    return Read(lines + pip_lines, detail, skipped, python=python)


class EnvironmentYml(Kind):
    """conda's environment file (repo2docker's first): its pip section and its conda packages
    that are on PyPI, as requirement lines; its ``python`` dependency, the Python asked for."""

    names = ("environment.yml", "environment.yaml")

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        return from_lines(found, read_environment_yml(found.path, root, found.where))

    def python(self, found: Discovered, root: str) -> tuple[str, str] | None:
        wanted = read_environment_yml(found.path, root, found.where).python
        return (wanted, f"{found.shown}'s python") if wanted else None
