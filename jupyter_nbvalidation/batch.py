"""Many notebooks in one command (``jupyter nbvalidation run``, the pytest plugin):
find them, validate each as its own job, several at a time, and collect what
each ended with. Jobs are reached only through the CLI's clients: in this
process (``InProcess``: one engine for the whole batch, the data dir's lease as
for ``submit``) or through a running server (``Remote``)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import glob
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from .client import ClientError
from .tasks import wait_within

SKIP_DIRS = {".ipynb_checkpoints", "__pycache__", "node_modules"}
GLOB_CHARS = set("*?[")
BUILD_LOG_TAIL = 60  # lines of the build log kept with an outcome
KEEPS_NOTEBOOK = ("Succeeded", "Failed", "Unchanged")  # an executed notebook to save (--output-dir)


class BatchInputError(Exception):
    """A usage mistake found before anything is submitted (exit code 2)."""


class Interrupted(Exception):
    """Ctrl-C (SIGINT) or SIGTERM during an in-process batch: its jobs were cancelled,
    their runners and kernels stopped; ``outcomes`` holds every item in order, those
    that had not ended as ``Cancelled`` (the CLI prints them and exits 130)."""

    def __init__(self, outcomes: list["Outcome"]):
        super().__init__("interrupted")
        self.outcomes = outcomes


#: seconds an interrupted batch waits for its cancelled jobs to end (kills included)
INTERRUPT_GRACE = 3.0


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

        submitted: dict[int, asyncio.Future[dict]] = {}  # item index -> its submit, for an interrupt
        one = _in_process_one(api, make_spec, options, tracker, submitted)

        async def go() -> list[Outcome]:
            await _start(api)
            ended: dict[int, Outcome] = {}
            try:
                slots = asyncio.Semaphore(max(1, options.jobs))

                async def limited(index: int, item: Item) -> Outcome:
                    async with slots:
                        ended[index] = await one(item, index)
                        return ended[index]

                work = asyncio.ensure_future(asyncio.gather(*(limited(i, item) for i, item in enumerate(items))))
                with _interrupts(work) as interrupted:
                    try:
                        outcomes = await work
                    except asyncio.CancelledError:
                        if not interrupted:
                            raise
                        cancelled = await _cancel_batch(api, items, submitted, ended)
                        await api.service.hand_over(drain=False)  # the lease back now: nothing of ours runs on
                        raise Interrupted(cancelled) from None
                await _hand_over(api)
                return list(outcomes)
            finally:
                await _stop(api)

        try:
            return api.loop.run_until_complete(go())
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None
    stop = threading.Event()
    names: dict[int, str] = {}  # item index -> its job on the server, for an interrupt
    remote = _remote_one(api, make_spec, options, tracker, stop, names)
    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    futures = [pool.submit(remote, item, i) for i, item in enumerate(items)]
    try:
        outcomes = [f.result() for f in futures]
    except KeyboardInterrupt:
        # Ctrl-C: the waits end, and the jobs this run submitted that have not ended are cancelled
        # on the server (as in this process), not waited for
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        interrupted = []
        for i, (item, f) in enumerate(zip(items, futures)):
            if f.done() and not f.cancelled() and f.exception() is None:
                interrupted.append(f.result())
                continue
            job = None
            if i in names:
                try:
                    job = api.cancel(names[i])
                except ClientError:
                    pass
            interrupted.append(Outcome(item, "Cancelled", job=job, message="interrupted before it ended"))
        raise Interrupted(interrupted) from None
    pool.shutdown()
    return outcomes


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


@contextlib.contextmanager
def _interrupts(work: "asyncio.Future[Any]") -> Iterator[list[int]]:
    """SIGINT and SIGTERM, while ``work`` runs on this loop: the first cancels it (the
    caller then cancels its jobs: :func:`_cancel_batch`), a second one ends the process
    at once (exit 130). Yields a list that is non-empty once a signal came."""
    loop = asyncio.get_running_loop()
    came: list[int] = []

    def on_signal(signum: int) -> None:
        came.append(signum)
        if len(came) > 1:
            os._exit(130)  # the user insists: no more waiting
        work.cancel()

    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            pass
    try:
        yield came
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


async def _cancel_batch(api: Any, items: list[Item], submitted: dict[int, "asyncio.Future[dict]"],
                        ended: dict[int, Outcome]) -> list[Outcome]:
    """After an interrupt: every job this batch submitted that has not ended is
    cancelled (the engine stops its build or its runner and kernel), waited for at
    most INTERRUPT_GRACE s; the outcomes so far, the others Cancelled."""
    service = api.service
    open_jobs: dict[int, str] = {}
    for i, submit in submitted.items():
        if i in ended:
            continue
        try:  # a submit under way ends in moments (its store write)
            job = await wait_within(asyncio.shield(submit), INTERRUPT_GRACE)
        except Exception:  # refused, or the store is away: no job of ours
            continue
        open_jobs[i] = job["metadata"]["name"]
    for name in open_jobs.values():
        try:
            await service.cancel(name)
        except Exception:  # ended meanwhile, or the store is away: the wait below tells
            pass

    async def final(name: str) -> dict | None:
        try:
            return await service.wait_for_terminal(name, INTERRUPT_GRACE)
        except Exception:
            return None

    finals = dict(zip(open_jobs, await asyncio.gather(*(final(n) for n in open_jobs.values()))))
    outcomes = []
    for i, item in enumerate(items):
        if i in ended:
            outcomes.append(ended[i])
        elif finals.get(i) is not None:
            job = finals[i]
            outcomes.append(Outcome(item, _verdict(job), job=job, message="interrupted: " +
                                    str((job.get("status") or {}).get("message", ""))))
        else:
            outcomes.append(Outcome(item, "Cancelled", message="interrupted before it ended"))
    return outcomes


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


def _in_process_one(api: Any, make_spec: Callable[[Item], dict], options: Options, tracker: _Tracker,
                    submitted: dict[int, "asyncio.Future[dict]"] | None = None) -> Callable[..., Awaitable[Outcome]]:
    """One notebook through the service in this process (its engine started);
    ``submitted`` learns each submit (its job) by the item's index."""
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

    async def one(item: Item, index: int = -1) -> Outcome:
        started = time.monotonic()
        spec = make_spec(item)
        try:
            hit = await service.unchanged(spec) if options.use_cache else None
            if hit is None:
                # a submit goes through once begun (shielded): an interrupt meanwhile then
                # finds the job it made and cancels it, never leaves it for a later run
                submitting = asyncio.ensure_future(service.submit(spec))
                if submitted is not None:
                    submitted[index] = submitting
                job = await asyncio.shield(submitting)
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


def _remote_one(api: Any, make_spec: Callable[[Item], dict], options: Options, tracker: _Tracker,
                stop: threading.Event | None = None, names: dict[int, str] | None = None) -> Callable[..., Outcome]:
    """One notebook through a running server's REST API (blocking: one thread each);
    ``stop`` ends its wait (an interrupt), ``names`` learns its job by the item's index."""
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

    def one(item: Item, index: int = -1) -> Outcome:
        started = time.monotonic()
        spec = make_spec(item)
        try:
            if stop is not None and stop.is_set():
                raise ClientError("interrupted")
            hit = api.unchanged(spec) if options.use_cache else None
            if hit is None:
                job = api.submit(spec)
                if names is not None:
                    names[index] = job["metadata"]["name"]
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
            out = _ended(item, api.wait(name, lambda j: tracker.update(item, j), options.timeout, stop), started)
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
