"""The check of every requirement line of a job, whatever its source (the spec list,
a requirements file, the file a repository declares its environment in):

- requirement specifiers (``name[extras] ==1.0 ; markers``) and ``http``,
  ``https``, ``git+https`` URLs are taken as they are;
- options only from :data:`lines.ALLOWED_OPTIONS`, spelled in full (pip's option
  parser takes any unambiguous prefix, so ``--constr`` *is* ``--constraint``:
  every abbreviation is refused, naming the option it stands for);
- ``-r`` (inlined) and ``-c`` files, ``-e`` and plain local paths,
  ``--find-links DIR`` and ``file://`` URLs only inside the server root; a
  local package's or folder's content is hashed into the environment's cache
  key (trees.py), so an edit rebuilds. ``-e`` is installed as a regular
  (non-editable) install: a cached environment must not follow later edits of
  its source;
- ``${VAR}`` is refused (pip and uv would expand it from the server's
  environment);
- credentials in URLs are replaced (credentials.py).
"""

from __future__ import annotations

import os
import re
import shlex
from typing import NoReturn
from urllib.parse import unquote

from jupyter_nbvalidation.environment.credentials import redact_url
from jupyter_nbvalidation.environment.lines import (
    ALLOWED_OPTIONS,
    ARCHIVE_SUFFIXES,
    LONG_OPTIONS,
    NAME,
    PER_REQUIREMENT_OPTIONS,
    REFUSED_OPTIONS,
    REMOTE_SCHEMES,
    SPEC_REST,
    URL,
    logical_lines,
    split_extras,
)
from jupyter_nbvalidation.environment.model import Requirements
from jupyter_nbvalidation.environment.reading import MAX_FILE_BYTES, RequirementsError, inside, read_confined
from jupyter_nbvalidation.environment.trees import tree_hash

MAX_LINES = 2000  # requirement + constraint lines after inlining -r files
MAX_LINE_CHARS = 4096
MAX_INCLUDE_DEPTH = 5  # -r / -c nesting
MAX_LIST_ITEMS = 500  # spec.podConfig.buildConfig.requirements


class Collector:
    """The one check of requirement lines (a file's, a spec list's, a discovered file's),
    gathered into :attr:`out`; ``fail`` raises :class:`RequirementsError` naming where."""

    def __init__(self, root: str, field_name: str, origin: str):
        self.root = os.path.realpath(root)
        self.field = field_name
        self.out = Requirements(origin=origin)
        self.seen_files: set[str] = set()

    # where: e.g. "requirements.txt beside the notebook (sub/requirements.txt) line 3"
    def fail(self, where: str, reason: str, status: int = 400) -> NoReturn:
        raise RequirementsError(self.field, f"{where}: {reason}", status)

    def rel(self, real: str) -> str:
        return os.path.relpath(real, self.root)

    def redact_url(self, url: str, where: str) -> tuple[str, str]:
        """(build form, display form) of a URL: credentials become a placeholder / ***."""
        try:
            return redact_url(url, self.out.secrets)
        except ValueError as e:
            self.fail(where, str(e))

    def local(self, value: str, base: str, where: str, what: str, *, want_dir: bool | None = None) -> str:
        """A local path (relative to ``base``) or file:// URL: its real path, inside the root."""
        raw = value
        if value.lower().startswith("file:"):
            value = re.sub(r"^file:(//(localhost)?)?", "", value, flags=re.I)
            value = unquote(value)
        if value.startswith("~"):
            self.fail(where, f"{what} {raw!r}: '~' paths are not accepted; give a path inside the server root")
        full = os.path.realpath(os.path.join(base, value))
        if not inside(full, self.root):
            self.fail(where, f"{what} {raw!r} is outside the server root (only paths inside it are accepted, "
                             "and their content is part of the environment's cache key)")
        if not os.path.exists(full):
            self.fail(where, f"{what} {raw!r}: no such file or folder", 404)
        if want_dir is True and not os.path.isdir(full):
            self.fail(where, f"{what} {raw!r} is not a folder")
        try:
            tree_hash(full)  # bounded now, so a later build never meets an unhashable tree
        except (OSError, ValueError) as e:
            self.fail(where, f"{what} {raw!r}: its content cannot be hashed for the cache key: {e}")
        self.out.local_paths.append(full)
        return full

    def url_or_path(self, value: str, base: str, where: str, what: str) -> tuple[str, str]:
        """An option value that is a URL (remote schemes) or a local path."""
        m = URL.match(value)
        if m and m.group(1).lower() != "file":
            if m.group(1).lower() not in ("http", "https"):
                self.fail(where, f"{what}: the {m.group(1)} scheme is not accepted (http or https)")
            return self.redact_url(value, where)
        if not m and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value) and not os.path.exists(os.path.join(base, value)):
            self.fail(where, f"{what}: {value!r} is neither an http(s) URL nor a path")
        full = self.local(value, base, where, what)
        return full, full

    def read_file(self, path: str, what: str, depth: int) -> tuple[str, str]:
        """(text, real path) of a requirements/constraints file."""
        if depth > MAX_INCLUDE_DEPTH:
            self.fail(what, f"files are nested over {MAX_INCLUDE_DEPTH} levels deep (-r/-c)")
        got = read_confined(path, self.root, MAX_FILE_BYTES, what, self.field)
        assert got is not None
        data, real = got
        if real in self.seen_files:
            self.fail(what, "is included twice (a -r/-c cycle?)")
        self.seen_files.add(real)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.fail(what, "is not UTF-8 text")
        return text, real

    def file(self, path: str, what: str, *, constraints: bool = False, depth: int = 0) -> None:
        text, real = self.read_file(path, what, depth)
        base = os.path.dirname(real)
        for n, line in logical_lines(text):
            self.line(line, base, f"{what} line {n}", constraints=constraints, depth=depth)

    def add(self, build: str, display: str, constraints: bool, where: str) -> None:
        lines, shown = ((self.out.constraints, self.out.display_constraints) if constraints
                        else (self.out.lines, self.out.display_lines))
        lines.append(build)
        shown.append(display)
        if len(self.out.lines) + len(self.out.constraints) > MAX_LINES:
            self.fail(where, f"over {MAX_LINES} requirement lines (the limit)")

    def spec_list(self, entries: list[str], base: str, *, constraints: bool = False) -> None:
        """A spec list (``requirements``, ``constraints``): bounded, one line an entry, comments
        dropped, each line checked as a file's line is; ``[i]`` names the entry."""
        if len(entries) > MAX_LIST_ITEMS:
            self.fail(self.field, f"has {len(entries)} entries; the limit is {MAX_LIST_ITEMS}")
        for i, entry in enumerate(entries):
            if "\n" in entry or "\r" in entry:
                self.fail(f"{self.field}[{i}]", "an entry is one line")
            line = re.sub(r"(^|\s+)#.*$", "", entry).strip()
            if line:
                self.line(line, base, f"{self.field}[{i}]", constraints=constraints)

    def line(self, line: str, base: str, where: str, *, constraints: bool = False, depth: int = 0) -> None:
        if len(line) > MAX_LINE_CHARS:
            self.fail(where, f"the line is over {MAX_LINE_CHARS} characters")
        if any(ord(c) < 32 and c != "\t" for c in line):
            self.fail(where, "contains a control character")
        if "${" in line or re.search(r"\$[A-Za-z_]", line):
            self.fail(where, "environment variables ($VAR, ${VAR}) are not accepted: pip and uv would expand "
                             "them from the server's environment")
        try:
            tokens = shlex.split(line, posix=True)
        except ValueError as e:
            self.fail(where, f"cannot be split into words: {e}")
        if not tokens:
            return
        if tokens[0].startswith("-"):
            self.options(tokens, base, where, constraints=constraints, depth=depth)
        else:
            self.requirement(line, base, where, constraints=constraints)

    def option_name(self, token: str, where: str) -> tuple[str, str | None]:
        """(canonical option, attached value) of a token; abbreviations refused."""
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            attached = value if eq else None
            if name in ALLOWED_OPTIONS or name in PER_REQUIREMENT_OPTIONS:
                return name, attached
            if name in REFUSED_OPTIONS:
                self.fail(where, f"{name} is not accepted: {REFUSED_OPTIONS[name]}")
            full = [o for o in LONG_OPTIONS if o.startswith(name)] if len(name) > 2 else []
            if full:
                self.fail(where, f"{name} abbreviates {' or '.join(full)}: abbreviated options are not accepted "
                                 "(pip would take it as that option); write the option in full"
                          + (f"; {full[0]} is not accepted: {REFUSED_OPTIONS[full[0]]}"
                             if len(full) == 1 and full[0] in REFUSED_OPTIONS else ""))
            self.fail(where, f"{name} is not an accepted option (accepted: "
                             f"{', '.join(o for o in ALLOWED_OPTIONS if o.startswith('--'))})")
        short, attached = token[:2], (token[2:] or None)
        if short in ALLOWED_OPTIONS:
            if attached is not None and attached.startswith("="):
                attached = attached[1:]
            if not ALLOWED_OPTIONS[short] and attached is not None:
                self.fail(where, f"{token} is not an accepted option")
            return short, attached
        self.fail(where, f"{token[:2]} is not an accepted option (accepted: -i, -f, -r, -c, -e and the long "
                         "options " + ", ".join(o for o in ALLOWED_OPTIONS if o.startswith("--")) + ")")
        raise AssertionError

    def options(self, tokens: list[str], base: str, where: str, *, constraints: bool, depth: int) -> None:
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if not token.startswith("-"):
                self.fail(where, f"{token!r} follows the options; give a requirement on a line of its own")
            name, value = self.option_name(token, where)
            if name in PER_REQUIREMENT_OPTIONS:
                self.fail(where, f"{name} belongs after a requirement on the same line")
            takes = ALLOWED_OPTIONS[name]
            if takes and value is None:
                i += 1
                if i >= len(tokens):
                    self.fail(where, f"{name} needs a value")
                value = tokens[i]
            i += 1
            long = {"-i": "--index-url", "-f": "--find-links", "-r": "--requirement", "-c": "--constraint",
                    "-e": "--editable"}.get(name, name)
            if constraints and long not in ("--constraint",):
                self.fail(where, f"{long} is not accepted in a constraints file (constraints are requirement "
                                 "specifiers)")
            if long in ("--index-url", "--extra-index-url"):
                assert value is not None  # these options take a value (ALLOWED_OPTIONS): read above
                m = URL.match(value or "")
                if not m or m.group(1).lower() not in ("http", "https"):
                    self.fail(where, f"{long} needs an http or https URL")
                build, display = self.redact_url(value, where)
                self.add(f"{long} {build}", f"{long} {display}", False, where)
            elif long == "--find-links":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                build, display = self.url_or_path(value, base, where, long)
                self.add(f"{long} {build}", f"{long} {display}", False, where)
            elif long == "--requirement":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                self.file(self.local_file(value, base, where, long), f"{where}: -r {value}", depth=depth + 1)
            elif long == "--constraint":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                self.file(self.local_file(value, base, where, long), f"{where}: -c {value}", constraints=True,
                          depth=depth + 1)
            elif long == "--editable":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                if URL.match(value) and not value.lower().startswith("file:"):
                    self.fail(where, "-e takes a local path inside the server root (for a remote package, "
                                     "give its URL without -e)")
                path, extras = split_extras(value)
                full = self.local(path, base, where, "-e")
                # a regular install of the path: the cached environment must not follow later edits
                self.add(f"{full}{extras}", f"{full}{extras}", False, where)
            elif long in ("--only-binary", "--no-binary"):
                if not re.match(r"^(:all:|:none:|[A-Za-z0-9._,-]+)$", value or ""):
                    self.fail(where, f"{long} takes :all:, :none: or package names")
                self.add(f"{long} {value}", f"{long} {value}", False, where)
            else:
                self.add(long, long, False, where)

    def local_file(self, value: str, base: str, where: str, what: str) -> str:
        if URL.match(value) and not value.lower().startswith("file:"):
            self.fail(where, f"{what} takes a file inside the server root, not a URL")
        if value.lower().startswith("file:"):
            value = re.sub(r"^file:(//(localhost)?)?", "", value, flags=re.I)
        full = os.path.realpath(os.path.join(base, value))
        if value.startswith("~") or not inside(full, self.root):
            self.fail(where, f"{what} {value!r} is outside the server root (only files inside it are accepted)")
        return full

    def requirement(self, line: str, base: str, where: str, *, constraints: bool) -> None:
        # pip: the requirement ends at the first word that starts with '-' (its options follow)
        words = line.split()
        cut = next((i for i, w in enumerate(words) if w.startswith("-") and i > 0), len(words))
        req, opts = " ".join(words[:cut]), words[cut:]
        extra_opts = []
        j = 0
        while j < len(opts):
            name, value = self.option_name(opts[j], where)
            if name not in PER_REQUIREMENT_OPTIONS:
                self.fail(where, f"{name} cannot follow a requirement (accepted there: --hash)")
            if value is None:
                j += 1
                if j >= len(opts):
                    self.fail(where, f"{name} needs a value")
                value = opts[j]
            if not re.match(r"^[a-z0-9]+:[0-9a-fA-F]+$", value):
                self.fail(where, "--hash takes <algorithm>:<hex digest>")
            extra_opts.append(f"{name}={value}")
            j += 1
        suffix = "".join(f" {o}" for o in extra_opts)
        target, _, marker = req.partition(";")
        marker = f" ;{marker}" if _ else ""
        target = target.strip()
        if " @ " in target or re.match(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?\s*@\s*\S", target):
            name, _, url = target.partition("@")
            name, url = name.strip(), url.strip()
            if not NAME.fullmatch(name):
                self.fail(where, f"{name!r} is not a package name")
            build, display = self.requirement_url(url, base, where)
            self.add(f"{name} @ {build}{marker}{suffix}", f"{name} @ {display}{marker}{suffix}", constraints, where)
            return
        if URL.match(target):
            build, display = self.requirement_url(target, base, where)
            self.add(f"{build}{marker}{suffix}", f"{display}{marker}{suffix}", constraints, where)
            return
        path, extras = split_extras(target)
        if path.startswith((".", "/", "~")) or "/" in path or path.lower().endswith(ARCHIVE_SUFFIXES):
            if constraints:
                self.fail(where, "a constraints file takes requirement specifiers, not paths")
            full = self.local(path, base, where, "the local path")
            self.add(f"{full}{extras}{marker}{suffix}", f"{full}{extras}{marker}{suffix}", constraints, where)
            return
        m = NAME.match(target)
        if not m or not SPEC_REST.match(target[m.end():]):
            self.fail(where, f"{target!r} is not a requirement specifier (name[extras] version ; markers), "
                             "an http(s) URL or a path inside the server root")
        if constraints:  # read by the standard parser now, not first by the installer at build time
            from packaging.requirements import InvalidRequirement  # deferred: start-up time (packaging's parser)
            from packaging.requirements import Requirement as Pep508  # deferred: start-up time (packaging's parser)

            try:
                Pep508(req.strip())
            except InvalidRequirement as e:
                self.fail(where, f"{req.strip()!r} is not a requirement specifier: "
                                 f"{str(e).splitlines()[0] if str(e) else 'invalid'}")
        self.add(f"{req.strip()}{suffix}", f"{req.strip()}{suffix}", constraints, where)

    def requirement_url(self, url: str, base: str, where: str) -> tuple[str, str]:
        m = URL.match(url)
        scheme = m.group(1).lower() if m else ""
        if scheme == "file" or not m:
            full = self.local(url, base, where, "the local path")
            return "file://" + full, "file://" + full
        if scheme not in REMOTE_SCHEMES:
            self.fail(where, f"the {scheme} URL scheme is not accepted (accepted: {', '.join(REMOTE_SCHEMES)}, and "
                             "file:// or paths inside the server root)")
        return self.redact_url(url, where)
