"""Many notebooks in one command (``jupyter nbvalidation run``, the pytest plugin):
find them, validate each as its own job, several at a time, and collect what
each ended with. Jobs are reached only through the CLI's clients: in this
process (``InProcess``: one engine for the whole batch, the data dir's lease as
for ``submit``) or through a running server (``Remote``)."""

from __future__ import annotations

import asyncio
import fnmatch
import glob
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from .client import ClientError

SKIP_DIRS = {".ipynb_checkpoints", "__pycache__", "node_modules"}
GLOB_CHARS = set("*?[")
BUILD_LOG_TAIL = 60  # lines of the build log kept with an outcome
KEEPS_NOTEBOOK = ("Succeeded", "Failed", "Unchanged")  # an executed notebook to save (--output-dir)


class BatchInputError(Exception):
    """A usage mistake found before anything is submitted (exit code 2)."""


@dataclass
class Item:
    """One notebook to validate: its path (absolute), how it is shown, its golden copy."""

    path: Path
    shown: str
    golden: Path | None = None

    @property
    def folder(self) -> str:
        return os.path.dirname(self.shown)


@dataclass
class Outcome:
    item: Item
    verdict: str  # Succeeded | Failed | Error | Cancelled | Refused | Unchanged (Error: InfrastructureFailed)
    seconds: float = 0.0
    job: dict | None = None
    message: str = ""
    timeline: dict | None = None
    build_log: str = ""
    executed: dict | None = None

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"] if self.job else ""

    @property
    def ok(self) -> bool:
        return self.verdict in ("Succeeded", "Unchanged")


# -- finding notebooks ---------------------------------------------------------------------------

def _shown(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _walk(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".ipynb") and not f.startswith(".")]
    return found


def _excluded(shown: str, patterns: list[str]) -> bool:
    parts = shown.split("/")
    for pattern in patterns:
        pat = pattern.rstrip("/")
        if fnmatch.fnmatchcase(shown, pat) or fnmatch.fnmatchcase(parts[-1], pat):
            return True
        # a folder: "drafts" (a folder of that name anywhere) or "docs/drafts" excludes what is below it
        if any(fnmatch.fnmatchcase("/".join(parts[:i]), pat) or fnmatch.fnmatchcase(parts[i - 1], pat)
               for i in range(1, len(parts))):
            return True
    return False


def is_golden_copy(path: Path, suffix: str | None) -> bool:
    """``<stem><suffix>.ipynb`` beside ``<stem>.ipynb``: a golden copy, compared with, not validated."""
    if not suffix:
        return False
    stem = path.name[: -len(".ipynb")]
    return stem.endswith(suffix) and path.with_name(stem[: -len(suffix)] + ".ipynb").is_file()


def golden_of(path: Path, suffix: str | None) -> Path | None:
    if not suffix:
        return None
    candidate = path.with_name(path.name[: -len(".ipynb")] + suffix + ".ipynb")
    return candidate if candidate.is_file() else None


def discover(paths: list[str], exclude: list[str] | None = None, golden_suffix: str | None = None,
             golden_self: bool = False, base: str | None = None) -> list[Item]:
    """The notebooks ``paths`` name: files, folders (recursive; hidden folders and
    ``.ipynb_checkpoints`` skipped) and globs; minus ``exclude`` (globs on the shown
    path, its file name or a folder of it) and golden copies (``<stem><suffix>.ipynb``,
    the golden copy of ``<stem>.ipynb`` beside it). Raises BatchInputError naming the
    path when one names nothing, and when no notebook is left."""
    if golden_suffix is not None:
        if not golden_suffix or "/" in golden_suffix or golden_suffix.endswith(".ipynb"):
            raise BatchInputError(f"--golden-suffix {golden_suffix!r}: give what comes between a notebook's "
                                  "name and .ipynb in its golden copy's name, e.g. .golden")
        if golden_self:
            raise BatchInputError("--golden-suffix and --golden-self: give one of them")
    base_dir = Path(base or os.getcwd()).resolve()
    exclude = list(exclude or [])
    found: dict[Path, None] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            hits = _walk(p)
        elif p.is_file():
            if not raw.endswith(".ipynb"):
                raise BatchInputError(f"{raw}: not a notebook (.ipynb)")
            hits = [p]
        elif GLOB_CHARS & set(raw):
            hits = []
            for match in sorted(glob.glob(raw, recursive=True)):
                m = Path(match)
                if m.is_dir():
                    hits += _walk(m)
                elif match.endswith(".ipynb") and ".ipynb_checkpoints" not in m.parts:
                    hits.append(m)
            if not hits:
                raise BatchInputError(f"{raw}: the pattern matches no notebook")
        else:
            raise BatchInputError(f"{raw}: no such file or folder")
        for h in hits:
            found.setdefault(h.resolve(), None)
    items = []
    for path in found:
        shown = _shown(path, base_dir)
        if _excluded(shown, exclude):
            continue
        golden = None
        if golden_suffix:
            if is_golden_copy(path, golden_suffix):
                continue
            golden = golden_of(path, golden_suffix)
        elif golden_self:
            golden = path
        items.append(Item(path=path, shown=shown, golden=golden))
    if not items:
        what = " ".join(paths)
        raise BatchInputError(f"no notebooks found in {what}" + (" (after --exclude)" if exclude else ""))
    items.sort(key=lambda i: i.shown)
    return items


def common_root(items: list[Item]) -> str:
    """The deepest folder holding every notebook (and golden copy)."""
    paths = [str(i.path.parent) for i in items] + [str(i.golden.parent) for i in items if i.golden]
    return os.path.commonpath(paths)


# -- running them --------------------------------------------------------------------------------

#: the verdict of a job that ended because of a fault that is not the notebook's (InfrastructureFailed)
ERROR = "Error"


def _verdict(job: dict) -> str:
    st = job.get("status") or {}
    if st.get("phase") == "Failed" and st.get("reason") == "Cancelled":
        return "Cancelled"
    if st.get("phase") == "Failed" and st.get("reason") == "InfrastructureFailed":
        return ERROR  # not the notebook's failure: an error, as pytest tells an error from a failure
    return st.get("phase") or "Pending"


@dataclass
class Options:
    jobs: int = 1
    keep_executed: bool = False
    timeout: float | None = None
    use_cache: bool = False


class Listener:
    """What a batch tells as it goes (the CLI's live progress); all calls are serialised."""

    def started(self, item: Item, name: str) -> None: ...

    def phase(self, item: Item, name: str, phase: str) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...


@dataclass
class _Tracker:
    listener: Listener
    lock: threading.Lock = field(default_factory=threading.Lock)
    phases: dict[str, str] = field(default_factory=dict)

    def update(self, item: Item, job: dict) -> None:
        name, phase = job["metadata"]["name"], (job.get("status") or {}).get("phase") or "Pending"
        with self.lock:
            if self.phases.get(name) != phase:
                self.phases[name] = phase
                self.listener.phase(item, name, phase)

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            fn(*args)


def run_batch(api: Any, items: list[Item], make_spec: Callable[[Item], dict], options: Options,
              listener: Listener | None = None) -> list[Outcome]:
    """Validate every item as its own job, ``options.jobs`` at a time; the outcomes
    in the order of ``items``. With ``options.use_cache``, a notebook whose inputs
    match an earlier Succeeded job (the service's verdict cache, in this process or
    on the server) is reported Unchanged with that job, and nothing runs."""
    tracker = _Tracker(listener or Listener())
    if hasattr(api, "service"):
        from .service import ApiError

        one = _in_process_one(api, make_spec, options, tracker)

        async def go() -> list[Outcome]:
            await _start(api)
            try:
                slots = asyncio.Semaphore(max(1, options.jobs))

                async def limited(item: Item) -> Outcome:
                    async with slots:
                        return await one(item)

                outcomes = await asyncio.gather(*(limited(item) for item in items))
                await _hand_over(api)
                return list(outcomes)
            finally:
                await _stop(api)

        try:
            return api.loop.run_until_complete(go())
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None
    remote = _remote_one(api, make_spec, options, tracker)
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        return list(pool.map(remote, items))


class Session:
    """Notebooks validated one at a time as they come, each as ``run_batch`` validates
    it, on one client for the whole session (the pytest plugin: one item after the
    other). In this process the engine starts once and runs on its own loop in a
    thread until ``close``; through a server each call is its own requests."""

    def __init__(self, api: Any, make_spec: Callable[[Item], dict], options: Options):
        self.api = api
        self._thread: threading.Thread | None = None
        tracker = _Tracker(Listener())
        if hasattr(api, "service"):
            self._one = _in_process_one(api, make_spec, options, tracker)
            api.loop.run_until_complete(_start(api))
            self._thread = threading.Thread(target=api.loop.run_forever, name="nbvalidation-session", daemon=True)
            self._thread.start()
        else:
            self._remote = _remote_one(api, make_spec, options, tracker)

    def validate(self, item: Item) -> Outcome:
        if self._thread is None:
            return self._remote(item)
        from .service import ApiError

        try:
            return asyncio.run_coroutine_threadsafe(self._one(item), self.api.loop).result()
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None

    def close(self) -> None:
        """Hand the data dir over (runs this process started end first) and stop."""
        if self._thread is None:
            return

        async def finish() -> None:
            try:
                await _hand_over(self.api)
            finally:
                await _stop(self.api)

        try:
            asyncio.run_coroutine_threadsafe(finish(), self.api.loop).result()
        finally:
            self.api.loop.call_soon_threadsafe(self.api.loop.stop)
            self._thread.join()
            self._thread = None


async def _start(api: Any) -> None:
    await api.service.start()


async def _hand_over(api: Any) -> None:
    await api.service.hand_over()


async def _stop(api: Any) -> None:
    await api.service.stop()


def _unchanged(item: Item, hit: dict) -> Outcome:
    """The verdict cache's answer: the earlier Succeeded job that stands for this one."""
    return Outcome(item, "Unchanged", 0.0, job=hit, message=f"unchanged since {hit['metadata']['name']}")


def _ended(item: Item, job: dict, started: float) -> Outcome:
    """A job this run submitted, once it ended."""
    return Outcome(item, _verdict(job), time.monotonic() - started, job=job,
                   message=(job.get("status") or {}).get("message", ""))


def _refused(item: Item, e: ClientError, started: float) -> Outcome:
    return Outcome(item, "Refused", time.monotonic() - started, message=str(e))


def _in_process_one(api: Any, make_spec: Callable[[Item], dict], options: Options,
                    tracker: _Tracker) -> Callable[[Item], Awaitable[Outcome]]:
    """One notebook through the service in this process (its engine started)."""
    from .service import ApiError

    service = api.service

    async def details(out: Outcome) -> None:
        name = out.name
        out.timeline = await service.timeline(name)
        try:
            chunk = await service.build_log(name)
            out.build_log = _tail(chunk.data.decode("utf-8", "replace"), BUILD_LOG_TAIL)
        except ApiError:
            out.build_log = ""
        if options.keep_executed and out.verdict in KEEPS_NOTEBOOK:
            try:
                out.executed = await service.executed_notebook(name)
            except ApiError:
                out.executed = None

    async def one(item: Item) -> Outcome:
        started = time.monotonic()
        spec = make_spec(item)
        try:
            hit = await service.unchanged(spec) if options.use_cache else None
            if hit is None:
                job = await service.submit(spec)
        except ApiError as e:
            out = _refused(item, ClientError(e.message, e.status, e.field), started)
            tracker.call(tracker.listener.finished, out)
            return out
        if hit is not None:
            out = _unchanged(item, hit)
        else:
            name = job["metadata"]["name"]
            tracker.call(tracker.listener.started, item, name)
            out = _ended(item, await service.wait_for_terminal(name, options.timeout,
                                                               lambda j: tracker.update(item, j)), started)
        await details(out)
        tracker.call(tracker.listener.finished, out)
        return out

    return one


def _remote_one(api: Any, make_spec: Callable[[Item], dict], options: Options,
                tracker: _Tracker) -> Callable[[Item], Outcome]:
    """One notebook through a running server's REST API (blocking: one thread each)."""
    client = api.client

    def details(out: Outcome) -> None:
        name = out.name
        out.timeline = api.timeline(name)
        try:
            out.build_log = _tail(client.request("GET", f"jobs/{name}/buildlog", raw=True), BUILD_LOG_TAIL)
        except ClientError:
            out.build_log = ""
        if options.keep_executed and out.verdict in KEEPS_NOTEBOOK:
            try:
                out.executed = client.request("GET", f"jobs/{name}/notebook")
            except ClientError:
                out.executed = None

    def one(item: Item) -> Outcome:
        started = time.monotonic()
        spec = make_spec(item)
        try:
            hit = api.unchanged(spec) if options.use_cache else None
            if hit is None:
                job = api.submit(spec)
        except ClientError as e:
            if e.status is None or e.status >= 500:
                raise
            out = _refused(item, e, started)
            tracker.call(tracker.listener.finished, out)
            return out
        if hit is not None:
            out = _unchanged(item, hit)
        else:
            name = job["metadata"]["name"]
            tracker.call(tracker.listener.started, item, name)
            out = _ended(item, api.wait(name, lambda j: tracker.update(item, j), options.timeout), started)
        details(out)
        tracker.call(tracker.listener.finished, out)
        return out

    return one


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def save_executed(outcomes: list[Outcome], out_dir: str, root: str) -> list[str]:
    """Each executed notebook into ``out_dir`` at its path as shown (relative to ``root``
    when shown absolute); the files written."""
    import json

    written = []
    for o in outcomes:
        if o.executed is None:
            continue
        rel = o.item.shown if not os.path.isabs(o.item.shown) else os.path.relpath(o.item.path, root)
        target = Path(out_dir) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(o.executed, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(str(target))
    return written


def exit_code(outcomes: list[Outcome]) -> int:
    """0 when every notebook succeeded (or is unchanged since it did), 2 when one was
    refused as bad input, 1 when one failed for its own reasons (or was cancelled),
    else 3 when one ended in an infrastructure fault (Error: not the notebook's)."""
    if any(o.verdict == "Refused" for o in outcomes):
        return 2
    if any(not o.ok and o.verdict != ERROR for o in outcomes):
        return 1
    return 3 if any(o.verdict == ERROR for o in outcomes) else 0
