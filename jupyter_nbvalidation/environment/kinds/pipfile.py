"""``Pipfile.lock`` and ``Pipfile`` (pipenv's): ``Pipfile.lock``'s ``default`` section,
each package at its exact ``==`` version; ``Pipfile``'s ``[packages]`` (``"*"``: any
version; a table's ``version`` and ``extras``; ``path``/``git``/``file`` entries as a
local path or URL)."""

from __future__ import annotations

import json
from typing import Any

from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read, from_lines
from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, read_text, read_toml


def read_pipfile_lock(path: str, root: str, what: str) -> Read:
    text = read_text(path, root, what)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RequirementsError(FIELD, f"{what}: is not valid JSON: {e}") from None
    default = data.get("default") if isinstance(data, dict) else None
    if not isinstance(default, dict):
        raise RequirementsError(FIELD, f"{what}: has no default section")
    lines = []
    for name, entry in sorted(default.items()):
        lines.append((0, _pipenv_entry(name, entry, f"{what}: default.{name}", locked=True)))
    return Read(lines, f"the default section, {len(lines)} package{'' if len(lines) == 1 else 's'}")


def read_pipfile(path: str, root: str, what: str) -> Read:
    data = read_toml(path, root, what)
    packages = data.get("packages") or {}
    if not isinstance(packages, dict):
        raise RequirementsError(FIELD, f"{what}: [packages] is not a table")
    lines = [(0, _pipenv_entry(name, entry, f"{what}: packages.{name}", locked=False))
             for name, entry in packages.items()]
    return Read(lines, f"[packages], {len(lines)} package{'' if len(lines) == 1 else 's'}")


def _pipenv_entry(name: str, entry: Any, where: str, *, locked: bool) -> str:
    """One Pipfile / Pipfile.lock entry as a requirement line."""
    if isinstance(entry, str):
        entry = {"version": entry}
    if not isinstance(entry, dict):
        raise RequirementsError(FIELD, f"{where}: is neither a version nor a table")
    extras = entry.get("extras") or []
    if not isinstance(extras, list) or not all(isinstance(e, str) for e in extras):
        raise RequirementsError(FIELD, f"{where}: extras is not a list of names")
    full = name + (f"[{','.join(extras)}]" if extras else "")
    if entry.get("path") or entry.get("file"):
        target = str(entry.get("path") or entry.get("file"))
        return target if "://" in target else (target if target.startswith((".", "/")) else f"./{target}")
    if entry.get("git"):
        ref = entry.get("ref")
        return f"{full} @ git+{entry['git']}" + (f"@{ref}" if ref else "")
    version = entry.get("version", "*")
    if not isinstance(version, str):
        raise RequirementsError(FIELD, f"{where}: version is not a string")
    marker = entry.get("markers")
    line = full if version.strip() in ("*", "") else f"{full}{version.strip()}"
    if locked and not version.startswith("=="):
        raise RequirementsError(FIELD, f"{where}: a locked version is ==VERSION (found {version!r})")
    return line + (f" ; {marker}" if isinstance(marker, str) and marker else "")


class PipfileLock(Kind):
    """pipenv's lock: its default section, each package at its locked version."""

    names = ("Pipfile.lock",)

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        return from_lines(found, read_pipfile_lock(found.path, root, found.where))


class Pipfile(Kind):
    """pipenv's Pipfile: its [packages]."""

    names = ("Pipfile",)

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        return from_lines(found, read_pipfile(found.path, root, found.where))
