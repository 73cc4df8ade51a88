"""Requirement lines as pip reads them: the logical lines of a file, a requirement's
``[extras]``, and the options a requirements file (or list entry) may carry
(:data:`ALLOWED_OPTIONS`; every other is refused, :data:`REFUSED_OPTIONS` saying why).
Pure."""

from __future__ import annotations

import re

# option -> takes a value. The options a requirements file (or list entry) may carry.
ALLOWED_OPTIONS: dict[str, bool] = {
    "--index-url": True, "-i": True,
    "--extra-index-url": True,
    "--no-index": False,
    "--find-links": True, "-f": True,
    "--requirement": True, "-r": True,
    "--constraint": True, "-c": True,
    "--editable": True, "-e": True,
    "--pre": False,
    "--prefer-binary": False,
    "--only-binary": True,
    "--no-binary": True,
    "--require-hashes": False,
}
PER_REQUIREMENT_OPTIONS = {"--hash": True}
# pip/uv options that are refused, with the reason (every other option is refused as unknown)
REFUSED_OPTIONS: dict[str, str] = {
    "--trusted-host": "it turns off TLS verification for a host",
    "--use-feature": "pip features are chosen by the server",
    "--global-option": "it passes arbitrary arguments to a package's build",
    "--install-option": "it passes arbitrary arguments to a package's build",
    "--config-settings": "it passes arbitrary arguments to a package's build",
    "--build-option": "it passes arbitrary arguments to a package's build",
    "--no-build-isolation": "builds run isolated",
    "--target": "the environment is chosen by the server",
    "--prefix": "the environment is chosen by the server",
    "--root": "the environment is chosen by the server",
    "--user": "the environment is chosen by the server",
    "--src": "the environment is chosen by the server",
    "--cert": "certificates are configured on the server",
    "--client-cert": "certificates are configured on the server",
    "--proxy": "the network is configured on the server",
    "--keyring-provider": "credentials come from the index URL only",
    "--index-strategy": "the resolver is configured on the server",
    "--upgrade": "not a requirements-file option",
    "--force-reinstall": "not a requirements-file option",
    "--no-deps": "not a requirements-file option",
    "--ignore-installed": "not a requirements-file option",
    "--python": "the interpreter is chosen by the server",
    "--system": "the environment is chosen by the server",
    "--break-system-packages": "the environment is chosen by the server",
    "--default-index": "use --index-url",
    "--index": "use --index-url or --extra-index-url",
}
LONG_OPTIONS = sorted({*(o for o in ALLOWED_OPTIONS if o.startswith("--")), *PER_REQUIREMENT_OPTIONS,
                       *REFUSED_OPTIONS})

NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,\s-]*\])?")
SPEC_REST = re.compile(r"^[\sA-Za-z0-9._*,<>=!~()\[\]'\";:/+@-]*$")
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar", ".zip")
REMOTE_SCHEMES = ("http", "https", "git+https", "git+http", "hg+https", "svn+https", "bzr+https")


def text(lines: list[str]) -> str:
    """Lines as a file's text, each ending with a newline."""
    return "".join(f"{ln}\n" for ln in lines)


def split_extras(value: str) -> tuple[str, str]:
    m = re.match(r"^(.*?)(\[[A-Za-z0-9._,\s-]*\])?$", value)
    assert m
    return m.group(1), m.group(2) or ""


def logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's reading: comments dropped (a '#' at the start or after
    whitespace), backslash-continued lines joined; numbered by first line."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s+)#.*$", "", raw)
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out
