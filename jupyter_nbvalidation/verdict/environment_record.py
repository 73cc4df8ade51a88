"""The environment a verdict came from: what was installed, exactly (issue 22).

A record is taken with the kernel's own interpreter (``python -I -c PROBE``,
never imported into this process): the Python version, implementation and
platform, and every installed distribution with its exact version and where it
came from (PEP 610's ``direct_url.json``: an index, a URL, a VCS commit, a local
folder or file). The server adds what only it knows: the tool's own identity,
the environment's key and declared requirement lines, the content hash of each
local path (the same hash the environment's key uses).

Bounded (``MAX_DISTRIBUTIONS``, ``MAX_TEXT``), and credentials in URLs are
shown as ``***``. The record is a JSON document served at
``GET /jobs/{name}/environment``; backends only take and store it.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
from typing import Any

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.verdict.identity import runner_identity
from jupyter_nbvalidation.verdict.probe import (  # the runner in a Pod takes it too
    MAX_PROBE_BYTES,
    PROBE,
    PROBE_TIMEOUT,
)

KIND = "EnvironmentRecord"
API_VERSION = "nbvalidation.dev/v1"
MAX_DISTRIBUTIONS = 5000
MAX_TEXT = 300  # a name, version, URL or path


def tool_identity() -> dict[str, str]:
    """This tool, as an environment record names it: its version and a digest of
    what of it can change a verdict (the verdict cache's runner identity, verdict/identity.py)."""
    try:
        version = importlib.metadata.version("jupyter-nbvalidation")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"name": "jupyter-nbvalidation", "version": version, "sources": runner_identity()[:16]}


class RecordError(Exception):
    """The record could not be taken (the message says why)."""


def _cut(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def source_of(direct_url: dict[str, Any] | None, local_hashes: dict[str, str]) -> dict[str, Any]:
    """Where a distribution came from, from its PEP 610 ``direct_url.json``."""
    if not isinstance(direct_url, dict) or not isinstance(direct_url.get("url"), str):
        return {"kind": "index"}
    url = mask_urls(direct_url["url"])
    if isinstance(direct_url.get("vcs_info"), dict):
        vcs = direct_url["vcs_info"]
        return {"kind": "vcs", "url": _cut(url), "vcs": _cut(vcs.get("vcs", "")), "commit": _cut(vcs.get("commit_id", ""))}
    if url.startswith("file://"):
        path = url[len("file://"):]
        out: dict[str, Any] = {"kind": "local", "path": _cut(path)}
        if isinstance(direct_url.get("dir_info"), dict) and direct_url["dir_info"].get("editable"):
            out["editable"] = True
        digest = local_hashes.get(path) or local_hashes.get(path.rstrip("/"))
        if digest:
            out["contentHash"] = digest
        return out
    out = {"kind": "url", "url": _cut(url)}
    archive = direct_url.get("archive_info")
    if isinstance(archive, dict) and isinstance(archive.get("hashes"), dict):
        out["hashes"] = {_cut(k): _cut(v) for k, v in list(archive["hashes"].items())[:4]}
    return out


def shape(probe: dict[str, Any], *, environment: dict[str, Any], tool: dict[str, Any], taken_at: str,
          local_hashes: dict[str, str] | None = None) -> dict[str, Any]:
    """The record, from what the probe printed and what the server knows."""
    py_any, raw_any = probe.get("python"), probe.get("distributions")
    py: dict[str, Any] = py_any if isinstance(py_any, dict) else {}
    raw: list[Any] = raw_any if isinstance(raw_any, list) else []
    dists = []
    for d in raw[:MAX_DISTRIBUTIONS]:
        if not isinstance(d, dict) or not d.get("name"):
            continue
        entry: dict[str, Any] = {"name": _cut(d["name"]), "version": _cut(d.get("version", "")),
                                 "source": source_of(d.get("directUrl"), local_hashes or {})}
        dists.append(entry)
    dists.sort(key=lambda d: normalize(d["name"]))
    record = {"apiVersion": API_VERSION, "kind": KIND, "takenAt": taken_at,
              "python": {k: _cut(v) for k, v in py.items() if k in ("version", "implementation",
                                                                   "implementationVersion", "platform", "machine")},
              "distributions": dists, "environment": environment, "tool": tool}
    if len(raw) > MAX_DISTRIBUTIONS:
        record["truncated"] = {"distributions": len(raw), "kept": MAX_DISTRIBUTIONS}
    return record


async def probe(python: str, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """Run PROBE with ``python`` (asynchronously: never on the event loop's time)."""
    try:
        proc = await asyncio.create_subprocess_exec(python, "-I", "-c", PROBE, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as e:
        raise RecordError(f"{python} could not be run: {e}") from None
    try:
        out, err = await wait_within(proc.communicate(), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        proc.kill()
        await proc.wait()
        raise RecordError(f"{python} did not list its distributions within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        raise RecordError(f"{python} could not list its distributions (exit {proc.returncode}): {_cut(last)}")
    if len(out) > MAX_PROBE_BYTES:
        raise RecordError(f"{python} listed over {MAX_PROBE_BYTES} bytes of distributions")
    try:
        doc = json.loads(out)
    except ValueError:
        raise RecordError(f"{python} printed something other than the list of its distributions") from None
    if not isinstance(doc, dict):
        raise RecordError(f"{python} printed something other than the list of its distributions")
    return doc


def summary_lines(record: dict[str, Any], declared: list[str] | None = None, limit: int = 12) -> list[str]:
    """For ``describe``: the interpreter, the count, and the declared distributions
    (by the names the requirement lines give, and those installed from a path, URL
    or VCS) with their exact versions."""
    py = record.get("python") or {}
    dists = record.get("distributions") or []
    lines = [f"Python {py.get('version', '?')} ({py.get('implementation', '?')}) on {py.get('platform', '?')}, "
             f"{len(dists)} distribution{'' if len(dists) == 1 else 's'}"]
    names = {normalize(m.group(0)) for line in declared or []
             if (m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line.strip())) and not line.startswith("-")}
    # the declared ones by name, and every one not from an index (a local path, a URL, a VCS commit)
    shown = [d for d in dists if normalize(d["name"]) in names or (d.get("source") or {}).get("kind") != "index"]
    for d in shown[:limit]:
        src = d.get("source") or {}
        where = "" if src.get("kind") == "index" else f" ({src.get('kind')}: {src.get('path') or src.get('url', '')})"
        lines.append(f"{d['name']} {d['version']}{where}")
    if len(shown) > limit:
        lines.append(f"… and {len(shown) - limit} more declared")
    return lines
