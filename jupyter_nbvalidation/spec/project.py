"""The project settings file: options that live with the project, read by every way in (the
REST API when a spec leaves a field out, ``run``, ``submit``, the pytest plugin, the magic
through the server) and written by the lab's Options dialog (``PUT project-settings``).

A ``[tool.nbvalidation]`` table in the project's ``pyproject.toml``, or ``nbvalidation.toml``
(the same keys at the top level) where there is none::

    [tool.nbvalidation]                 # defaults for every notebook of the project
    timeout = "10m"
    [[tool.nbvalidation.notebooks]]     # per-notebook entries, matched by glob
    glob = "lessons/week1/analysis.ipynb"
    goldenNotebook = { path = "golden.ipynb" }

Keys are the job spec's fields (core/spec_table.py) minus ``notebook``; ``goldenNotebook.path``
is relative to the notebook's folder, a glob relative to the settings file's folder. What a
notebook gets: the defaults, then every matching entry in order, field by field (a list is
replaced, not extended); a value the request gives (a CLI flag, a spec field) wins over them
(:func:`fill_spec`). Where the file is: :func:`locate`. Writing: spec/project_write.py."""

from __future__ import annotations

import copy
import os
import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.spec.checks import SpecError, validate_spec

PYPROJECT = "pyproject.toml"
STANDALONE = "nbvalidation.toml"
ENTRIES = "notebooks"  # the per-notebook entries' array of tables
GLOB = "glob"
MAX_SETTINGS_BYTES = 1 << 20


class SettingsError(ValueError):
    """A malformed settings file: ``<file>:<line>: <key>: <reason>``."""

    def __init__(self, file: str, line: int, key: str, reason: str):
        super().__init__(f"{file}:{line}: {key}: {reason}" if key else f"{file}:{line}: {reason}")
        self.file, self.line, self.key, self.reason = file, line, key, reason


@dataclass
class Entry:
    glob: str
    options: dict[str, Any]
    index: int  # its place among the entries


@dataclass
class Settings:
    """One settings file as read (an absent file: no defaults, no entries)."""

    path: Path  # absolute
    exists: bool
    defaults: dict[str, Any] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    locator: "Locator | None" = None

    def line_of_field(self, spec_field: str) -> tuple[int, str]:
        """(line, key) of the first place the file sets ``spec_field`` (a dotted spec path), or
        of the object holding it when the field is inside an inline table."""
        best: tuple[int, int, str] | None = None  # (-depth, line, key)
        for key, line in (self.locator.lines.items() if self.locator is not None else ()):
            inner = key[len(self.prefix):] if key.startswith(self.prefix) else key
            inner = re.sub(rf"^{ENTRIES}\[\d+\]\.", "", inner)
            if inner == spec_field or spec_field.startswith(inner + "."):
                candidate = (-inner.count("."), line, key)
                best = candidate if best is None or candidate < best else best
        return (best[1], best[2]) if best else (1, f"{self.prefix}{spec_field}")

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def prefix(self) -> str:
        """The settings table's key path in the file ("tool.nbvalidation." or "")."""
        return "tool.nbvalidation." if self.path.name == PYPROJECT else ""

    def relative(self, notebook: Path) -> str:
        """``notebook`` relative to the settings file's folder, '/'-separated (what a glob matches)."""
        return notebook.relative_to(self.folder).as_posix()

    def matching(self, notebook: Path) -> list[Entry]:
        rel = self.relative(notebook)
        # an entry written for exactly this path matches it, whatever its characters mean in a glob
        return [e for e in self.entries if e.glob == rel or glob_matches(e.glob, rel)]

    def own_entry(self, notebook: Path) -> Entry | None:
        """The entry written for exactly this notebook (its glob is the notebook's path)."""
        rel = self.relative(notebook)
        own = [e for e in self.entries if e.glob == rel]
        return own[-1] if own else None

    def options_for(self, notebook: Path) -> dict[str, Any]:
        """The merged partial spec: the defaults, then every matching entry in order."""
        merged: dict[str, Any] = copy.deepcopy(self.defaults)
        for entry in self.matching(notebook):
            merged = merge(merged, entry.options)
        return merged


# -- where the file is ------------------------------------------------------------------------


def _mentions_us(raw: bytes) -> bool:
    """A pyproject.toml that cannot be parsed is ours to report only when it names our table: a
    project's own broken file never turns a notebook that validates today into a refused one."""
    return b"nbvalidation" in raw


def _has_table(pyproject: Path) -> bool:
    try:
        raw = pyproject.read_bytes()
    except OSError:
        return False
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return _mentions_us(raw)  # malformed: reading it says why, if it is meant for us
    tool = doc.get("tool")
    return isinstance(tool, dict) and "nbvalidation" in tool


def locate(notebook: Path, root: Path) -> Path:
    """The settings file that applies to ``notebook`` (both absolute, resolved; ``notebook`` inside
    ``root``), or the one that would be written: the nearest folder at or above the notebook's
    folder (within ``root``) holding ``pyproject.toml`` or ``nbvalidation.toml``, else the
    nearest holding ``.git``, else ``root``. In that folder: ``pyproject.toml`` unless it has no
    ``[tool.nbvalidation]`` table and ``nbvalidation.toml`` is there; with neither,
    ``pyproject.toml`` if the folder has one, else ``nbvalidation.toml``."""
    folders = []
    folder = notebook.parent
    while True:
        folders.append(folder)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    chosen = next((f for f in folders if (f / PYPROJECT).is_file() or (f / STANDALONE).is_file()), None)
    if chosen is None:
        chosen = next((f for f in folders if (f / ".git").exists()), root)
    pyproject, standalone = chosen / PYPROJECT, chosen / STANDALONE
    if pyproject.is_file() and (not standalone.is_file() or _has_table(pyproject)):
        return pyproject
    return standalone


# -- reading it --------------------------------------------------------------------------------


_AT_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def _syntax_error(shown: str, text: str, e: tomllib.TOMLDecodeError) -> SettingsError:
    m = _AT_LINE.search(str(e))
    line = int(m.group(1)) if m else 1
    lines = text.splitlines()
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    key = here.split("=", 1)[0].strip() if "=" in here else here.strip()
    reason = _AT_LINE.sub("", str(e)).strip() or "not valid TOML"
    return SettingsError(shown, line, key[:200], f"not valid TOML: {reason}")


def load(path: Path, shown: str | None = None) -> Settings:
    """The settings in ``path`` (absent: empty), checked: every key a spec field (minus
    ``notebook``), every value as the spec takes it. ``shown``: the file as messages name it.
    Raises :class:`SettingsError` naming the file, the line and the key."""
    shown = shown or str(path)
    if not path.is_file():
        return Settings(path, exists=False)
    try:
        size = path.stat().st_size
        if size > MAX_SETTINGS_BYTES:
            raise SettingsError(shown, 1, "", f"the file is {size} bytes; the limit is {MAX_SETTINGS_BYTES}")
        raw = path.read_bytes()[:MAX_SETTINGS_BYTES + 1]
    except OSError as e:
        raise SettingsError(shown, 1, "", f"cannot be read: {e.strerror}") from None
    ours = path.name == STANDALONE or _mentions_us(raw)
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError:
        if not ours:
            return Settings(path, exists=True)
        raise SettingsError(shown, 1, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        if not ours:  # a project's pyproject.toml broken for reasons of its own: no settings in it
            return Settings(path, exists=True)
        raise _syntax_error(shown, text, e) from None
    return parse(doc, path, text, shown)


def parse(doc: dict[str, Any], path: Path, text: str, shown: str) -> Settings:
    """The settings of a parsed file (see :func:`load`)."""
    settings = Settings(path, exists=True, locator=Locator(text))
    prefix = settings.prefix
    table: Any = doc
    if prefix:
        table = (doc.get("tool") or {}).get("nbvalidation") if isinstance(doc.get("tool"), dict) else None
        if table is None:
            return settings
    where = settings.locator
    assert where is not None
    if not isinstance(table, dict):
        raise SettingsError(shown, where.line_of("tool.nbvalidation"), "tool.nbvalidation", "must be a table")
    table = dict(table)
    entries = table.pop(ENTRIES, [])
    settings.defaults = _checked(table, f"{prefix}", where, shown)
    key = f"{prefix}{ENTRIES}"
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SettingsError(shown, where.line_of(key), key,
                            f"must be an array of tables ([[{key}]]), each with a glob and options")
    for i, raw in enumerate(entries):
        raw = dict(raw)
        here = f"{key}[{i}]."
        glob = raw.pop(GLOB, None)
        if not isinstance(glob, str) or not glob.strip():
            raise SettingsError(shown, where.line_of(f"{key}[{i}].{GLOB}"), f"{key}[{i}].{GLOB}",
                                "is required: a glob of notebooks, relative to this file's folder")
        if glob.startswith("/") or ".." in glob.split("/") or "\\" in glob:
            raise SettingsError(shown, where.line_of(f"{key}[{i}].{GLOB}"), f"{key}[{i}].{GLOB}",
                                "must be relative to this file's folder, '/'-separated, without '..'")
        settings.entries.append(Entry(glob, _checked(raw, here, where, shown), i))
    return settings


#: a repository's file never hands its notebooks a secret of the server's: whoever submits names them
NOT_A_SETTING_CREDENTIALS = ("is not a setting: a job's secrets are named by whoever submits it (--credential, "
                             "podConfig.credentials), never by a file of the project (docs/secrets.md)")


def _checked(options: dict[str, Any], prefix: str, where: "Locator", shown: str) -> dict[str, Any]:
    """``options`` if they are a valid partial spec, else the SettingsError naming the key."""
    if "notebook" in options:
        raise SettingsError(shown, where.line_of(f"{prefix}notebook"), f"{prefix}notebook",
                            "is not a setting: the notebook is the one validated (an entry's glob chooses it)")
    if isinstance(options.get("podConfig"), dict) and "credentials" in options["podConfig"]:
        key = f"{prefix}podConfig.credentials"
        raise SettingsError(shown, where.line_of(key), key, NOT_A_SETTING_CREDENTIALS)
    try:
        validate_spec({"notebook": {"path": "settings.ipynb"}, **options})
    except SpecError as e:
        key = f"{prefix}{e.field}" if e.field and e.field != "spec" else prefix.rstrip(".") or "(top level)"
        reason = "unknown key: not a field of the job spec" if e.reason.startswith("unknown") else e.reason
        raise SettingsError(shown, where.line_of(key), key, reason) from None
    golden = (options.get("goldenNotebook") or {}).get("path")
    if isinstance(golden, str) and (golden.startswith("/") or "\\" in golden):
        key = f"{prefix}goldenNotebook.path"
        raise SettingsError(shown, where.line_of(key), key, "must be relative to the notebook's folder")
    return options


class Locator:
    """The line of a key path in a TOML text (``tool.nbvalidation.notebooks[1].comparisonConfig.lax``):
    the line of the longest prefix of it the text declares (a table header or a key line);
    best effort, line 1 when nothing matches."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")

    def __init__(self, text: str):
        self.lines: dict[str, int] = {}
        counts: dict[str, int] = {}
        table = ""
        for n, line in enumerate(text.splitlines(), 1):
            header = self._HEADER.match(line)
            if header and not self._KEY.match(line):
                name = _dotted(header.group(2))
                if header.group(1) == "[[":
                    i = counts.get(name, -1) + 1
                    counts[name] = i
                    name = f"{name}[{i}]"
                else:
                    name = self._indexed(name, counts)
                table = name
                self.lines.setdefault(table, n)
                continue
            key = self._KEY.match(line)
            if key:
                full = f"{table}.{_dotted(key.group(1))}" if table else _dotted(key.group(1))
                self.lines.setdefault(full, n)

    @staticmethod
    def _indexed(name: str, counts: dict[str, int]) -> str:
        """A sub-table of an array's last entry: ``a.notebooks.x`` → ``a.notebooks[2].x``."""
        for array, i in sorted(counts.items(), key=lambda kv: -len(kv[0])):
            if name.startswith(array + "."):
                return f"{array}[{i}]{name[len(array):]}"
        return name

    def line_of(self, key: str) -> int:
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.lines.get(".".join(parts[:n]))
            if found is not None:
                return found
        return 1


def _dotted(key: str) -> str:
    return ".".join(p.strip().strip("\"'") for p in re.findall(r"""\s*(?:"[^"]*"|'[^']*'|[^.]+)\s*""", key))


# -- merging ----------------------------------------------------------------------------------


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, field by field: objects merged (except ``parameters``, a value),
    anything else (a list too) replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "parameters":
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def glob_matches(pattern: str, rel: str) -> bool:
    """A glob (``*`` and ``?`` within a path segment, ``**`` any folders, ``[...]``) against a
    '/'-separated relative path."""
    return _glob_regex(pattern).fullmatch(rel) is not None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out))


# -- what a job gets --------------------------------------------------------------------------


def golden_in_root(options: dict[str, Any], notebook_rel: str) -> dict[str, Any]:
    """``options`` with ``goldenNotebook.path`` (relative to the notebook's folder in the file)
    as the spec takes it: relative to the root (where ``notebook_rel`` is). A path leaving the
    root stays as it is written, with ``..`` (the service refuses it, naming the field)."""
    golden = options.get("goldenNotebook")
    if not isinstance(golden, dict) or not isinstance(golden.get("path"), str):
        return options
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(notebook_rel), golden["path"]))
    return {**options, "goldenNotebook": {**golden, "path": joined}}


#: the build fields that choose where the environment comes from: one given by the request
#: replaces all of the file's (requirementsFile or requirements or extras, never two of them)
ENVIRONMENT_CHOICE = ("requirementsFile", "requirements", "extras")
#: the build fields that apply to a build only: left out of the file's when the request builds nothing
BUILD_ONLY = ("extras", "constraints")


def _yielding(from_file: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The file's options minus what a request's choice makes contradictory (a requirements list
    beside the file's requirementsFile, a constraint when the request turns the build off)."""
    asked = ((spec.get("podConfig") or {}).get("buildConfig") or {}) if isinstance(spec.get("podConfig"), dict) else {}
    ours = (from_file.get("podConfig") or {}).get("buildConfig")
    if not isinstance(asked, dict) or not isinstance(ours, dict):
        return from_file
    drop = set()
    if any(k in asked for k in ENVIRONMENT_CHOICE):
        drop |= set(ENVIRONMENT_CHOICE)
    if asked.get("enabled") is False:
        drop |= set(BUILD_ONLY)
    if not drop & set(ours):
        return from_file
    out = copy.deepcopy(from_file)
    out["podConfig"]["buildConfig"] = {k: v for k, v in ours.items() if k not in drop}
    return out


def fill_spec(spec: dict[str, Any], settings: Settings, notebook: Path, notebook_rel: str) -> dict[str, Any]:
    """``spec`` with what it leaves out taken from the settings for ``notebook``: what the
    request gives wins, field by field (and over the file's fields its choice contradicts)."""
    from_file = golden_in_root(settings.options_for(notebook), notebook_rel)
    return merge(_yielding(from_file, spec), spec) if from_file else spec


SKIP_FOLDERS = {"__pycache__", "node_modules", ".ipynb_checkpoints"}


def _notebooks_below(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIP_FOLDERS]
        found += [Path(dirpath, f) for f in filenames if f.endswith(".ipynb") and not f.startswith(".")]
    return found


def goldens(settings: Settings) -> set[Path]:
    """The notebooks below the settings file's folder that it names as another notebook's
    golden (resolved paths); a notebook that is its own golden is not one."""
    if "goldenNotebook" not in settings.defaults and not any("goldenNotebook" in e.options
                                                             for e in settings.entries):
        return set()
    named: set[Path] = set()
    folder = settings.folder.resolve()
    for nb in _notebooks_below(folder):
        golden = (settings.options_for(nb).get("goldenNotebook") or {}).get("path")
        if isinstance(golden, str):
            target = (nb.parent / golden).resolve()
            if target != nb.resolve():
                named.add(target)
    return named


def settings_folder_above(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` (resolved) whose ``pyproject.toml`` has a
    ``[tool.nbvalidation]`` table or which holds ``nbvalidation.toml``, searched up to a
    repository's top (``.git``); None when there is none. The CLI's own root is widened to
    it, so the file is read as a server whose root holds the project reads it."""
    for here in (folder, *folder.parents):
        if (here / STANDALONE).is_file() or ((here / PYPROJECT).is_file() and _has_table(here / PYPROJECT)):
            return here
        if (here / PYPROJECT).is_file() or (here / ".git").exists():
            return None
    return None


class GoldenFinder:
    """Which notebooks a project's settings name as another's golden (``run DIR`` and the pytest
    plugin do not validate them as notebooks), each settings file read once."""

    def __init__(self, root: Path | None = None):
        self.root = root
        self._by_file: dict[Path, set[Path]] = {}

    def is_golden(self, notebook: Path) -> bool:
        """Raises SettingsError for a malformed settings file."""
        notebook = notebook.resolve()
        root = self.root or settings_folder_above(notebook.parent) or notebook.parent
        if root not in (notebook.parent, *notebook.parent.parents):
            return False
        path = locate(notebook, root)
        if path not in self._by_file:
            self._by_file[path] = goldens(load(path))
        return notebook in self._by_file[path]
