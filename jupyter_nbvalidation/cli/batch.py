"""Many notebooks in one command (``jupyter nbvalidation run``, the pytest plugin):
find them, validate each as its own job, several at a time, and collect what
each ended with. Jobs are reached only through a client (clients.base.Client), one
shape for the CLI's two: in this process (``InProcess``: one engine for the whole
batch, the data dir's lease as for ``submit``) or through a running server
(``Remote``); one routine validates a notebook through either."""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import json
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from jupyter_nbvalidation.clients.base import INTERRUPT_GRACE, Client, ClientError, Json
from jupyter_nbvalidation.spec.project import GoldenFinder, SettingsError
from jupyter_nbvalidation.why_red.culprit import culprit_line, culprit_of

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
    job: Json | None = None
    message: str = ""
    timeline: Json | None = None
    build_log: str = ""
    executed: Json | None = None
    changes: Json | None = None  # a failure's "since the last success" (GET /jobs/{name}/changes)

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"] if self.job else ""

    @property
    def ok(self) -> bool:
        return self.verdict in ("Succeeded", "Unchanged")

    @property
    def since_last_success(self) -> str:
        """"Since the last success (job NAME): pandas 2.2.3 → 3.0.0; no cell changed" for a
        failure of a notebook that passed before; "" otherwise."""
        ch = self.changes or {}
        since = ch.get("since")
        if not since:
            return ""
        return f"since the last success (job {since.get('name', '')}): {ch.get('sentence', '')}"

    @property
    def culprit(self) -> str:
        """A red job's cause, when it is known (its notification's, or the commits alone): "" otherwise."""
        return culprit_line(culprit_of(self.job, self.changes))

    @property
    def environment(self) -> str:
        """What the job's environment was built from (``status.environment``; "" before it was planned)."""
        return str(((self.job or {}).get("status") or {}).get("environment") or "")


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
    the golden copy of ``<stem>.ipynb`` beside it; a notebook the project settings name
    as another's golden, found in a folder or by a glob). Raises BatchInputError naming
    the path when one names nothing or a settings file is malformed, and when no notebook
    is left."""
    if golden_suffix is not None:
        if not golden_suffix or "/" in golden_suffix or golden_suffix.endswith(".ipynb"):
            raise BatchInputError(f"--golden-suffix {golden_suffix!r}: give what comes between a notebook's "
                                  "name and .ipynb in its golden copy's name, e.g. .golden")
        if golden_self:
            raise BatchInputError("--golden-suffix and --golden-self: give one of them")
    base_dir = Path(base or os.getcwd()).resolve()
    exclude = list(exclude or [])
    found: dict[Path, None] = {}
    named: set[Path] = set()  # given as files: validated even when a golden
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            hits = _walk(p)
        elif p.is_file():
            if not raw.endswith(".ipynb"):
                raise BatchInputError(f"{raw}: not a notebook (.ipynb)")
            hits = [p]
            named.add(p.resolve())
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
    finder = GoldenFinder()
    for path in found:
        shown = _shown(path, base_dir)
        if _excluded(shown, exclude):
            continue
        try:
            if path not in named and finder.is_golden(path):
                continue  # the project's settings compare another notebook with it
        except SettingsError as e:
            raise BatchInputError(str(e)) from None
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


def _verdict(job: Json) -> str:
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

    def update(self, item: Item, job: Json) -> None:
        name, phase = job["metadata"]["name"], (job.get("status") or {}).get("phase") or "Pending"
        with self.lock:
            if self.phases.get(name) != phase:
                self.phases[name] = phase
                self.listener.phase(item, name, phase)

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            fn(*args)


def run_batch(api: Client, items: list[Item], make_spec: Callable[[Item], Json], options: Options,
              listener: Listener | None = None) -> list[Outcome]:
    """Validate every item as its own job, ``options.jobs`` at a time; the outcomes
    in the order of ``items``. With ``options.use_cache``, a notebook whose inputs
    match an earlier Succeeded job (the service's verdict cache, in this process or
    on the server) is reported Unchanged with that job, and nothing runs. Ctrl-C
    (KeyboardInterrupt in this thread): :class:`Interrupted`, its jobs cancelled."""
    api.begin()
    runs = _Runs(api, make_spec, options, _Tracker(listener or Listener()))
    clean = False
    try:
        outcomes = runs.all(items)
        clean = True
        return outcomes
    finally:
        # after an interrupt or an error nothing of ours is waited for (an interrupt cancelled
        # its jobs; after an error they are left to the data dir's next holder)
        runs.close(wait=clean)
        try:
            api.end(interrupted=not clean)
        except Exception:
            if clean:
                raise
            # the error under way says what went wrong (a full disk: the hand-over cannot be
            # written either); the data dir's next holder takes the jobs over


class Session:
    """Notebooks validated one at a time as they come, each as ``run_batch`` validates
    it, on one client for the whole session (the pytest plugin: one item after the
    other); in this process the engine starts once, until ``close``."""

    def __init__(self, api: Client, make_spec: Callable[[Item], Json], options: Options):
        self.api = api
        self.interrupted = False
        self._count = 0
        api.begin()
        self._runs: _Runs | None = _Runs(api, make_spec, options, _Tracker(Listener()))

    def validate(self, item: Item) -> Outcome:
        """Its outcome; Ctrl-C (or SIGTERM: the pytest plugin makes it one) while it runs:
        its job is cancelled, then KeyboardInterrupt."""
        assert self._runs is not None, "Session.validate after close"
        index, self._count = self._count, self._count + 1
        try:
            return self._runs.all([item], index)[0]
        except Interrupted:
            self.interrupted = True
            raise KeyboardInterrupt from None

    def close(self) -> None:
        """Hand the data dir over (runs this process started end first) and stop."""
        if self._runs is None:
            return
        runs, self._runs = self._runs, None
        runs.close(wait=not self.interrupted)
        self.api.end(interrupted=self.interrupted)


class _Runs:
    """The one routine for a notebook (on a worker thread, ``options.jobs`` at a time) and
    what an interrupt needs: which item's job is which, which ended."""

    def __init__(self, api: Client, make_spec: Callable[[Item], Json], options: Options, tracker: _Tracker):
        self.api, self.make_spec, self.options, self.tracker = api, make_spec, options, tracker
        self.stop = threading.Event()  # set by an interrupt: waits end, nothing new is submitted
        self.names: dict[int, str] = {}  # item index -> its job
        self.ended: dict[int, Outcome] = {}
        self.pool = ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="nbvalidation-item")

    def close(self, wait: bool) -> None:
        if not wait:
            self.stop.set()
        self.pool.shutdown(wait=wait, cancel_futures=not wait)

    def all(self, items: list[Item], first: int = 0) -> list[Outcome]:
        """The outcomes of ``items`` (indexes from ``first``), in order; a KeyboardInterrupt
        meanwhile becomes :class:`Interrupted` once their jobs are cancelled."""
        futures = [self.pool.submit(self.one, item, first + i) for i, item in enumerate(items)]
        try:
            return [f.result() for f in futures]
        except KeyboardInterrupt:
            with _insistent():
                raise Interrupted(self._interrupt(items, futures, first)) from None

    def one(self, item: Item, index: int) -> Outcome:
        api, tracker = self.api, self.tracker
        started = time.monotonic()
        spec = self.make_spec(item)
        try:
            if self.stop.is_set():
                raise ClientError("interrupted")
            hit = api.unchanged(spec) if self.options.use_cache else None
            if hit is None:
                job = api.submit(spec)
                self.names[index] = job["metadata"]["name"]
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
            out = _ended(item, api.wait(name, lambda j: tracker.update(item, j), self.options.timeout, self.stop),
                         started)
        self._details(out)
        self.ended[index] = out
        tracker.call(tracker.listener.finished, out)
        return out

    def _details(self, out: Outcome) -> None:
        api, name = self.api, out.name
        out.timeline = api.timeline(name)
        try:
            data, _, _ = api.build_log(name, 0)
            out.build_log = _tail(data.decode("utf-8", "replace"), BUILD_LOG_TAIL)
        except ClientError:
            out.build_log = ""
        if out.verdict == "Failed":  # why it turned red, when it passed before (issue 22)
            try:
                out.changes = api.changes(name)
            except ClientError:  # not recorded here (another backend, an older job)
                out.changes = None
        if self.options.keep_executed and out.verdict in KEEPS_NOTEBOOK:
            try:
                out.executed = api.executed_notebook(name)
            except ClientError:
                out.executed = None

    def _interrupt(self, items: list[Item], futures: list["Future[Outcome]"], first: int) -> list[Outcome]:
        """After Ctrl-C: no item starts any more, a submit under way ends (so its job is
        known), every job of these items that has not ended is cancelled (the engine stops
        its build or its runner and kernel) and waited for, each at most INTERRUPT_GRACE s;
        the outcomes so far, the others Cancelled."""
        self.stop.set()
        for f in futures:
            f.cancel()
        futures_wait(futures, timeout=INTERRUPT_GRACE)
        indexes = range(first, first + len(items))
        open_jobs = {i: self.names[i] for i in indexes if i in self.names and i not in self.ended}
        for name in open_jobs.values():
            try:
                self.api.cancel(name)
            except ClientError:  # ended meanwhile, or the store is away: the wait below tells
                pass
        deadline = time.monotonic() + INTERRUPT_GRACE
        outcomes = []
        for i, item in zip(indexes, items, strict=True):
            job = None
            if i in self.ended:
                outcomes.append(self.ended[i])
                continue
            if i in open_jobs:
                try:
                    job = self.api.wait(open_jobs[i], lambda j: None, max(0.1, deadline - time.monotonic()))
                except Exception:  # not ended within the grace, or the store is away
                    job = None
            if job is not None:
                outcomes.append(Outcome(item, _verdict(job), job=job, message="interrupted: " +
                                        str((job.get("status") or {}).get("message", ""))))
            else:
                outcomes.append(Outcome(item, "Cancelled", message="interrupted before it ended"))
        return outcomes


@contextlib.contextmanager
def _insistent() -> Iterator[None]:
    """While a first Ctrl-C's cancel runs (in the main thread): a second SIGINT or
    SIGTERM ends the process at once (exit 130)."""
    old = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, lambda *_: os._exit(130))
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _unchanged(item: Item, hit: Json) -> Outcome:
    """The verdict cache's answer: the earlier Succeeded job that stands for this one."""
    return Outcome(item, "Unchanged", 0.0, job=hit, message=f"unchanged since {hit['metadata']['name']}")


def _ended(item: Item, job: Json, started: float) -> Outcome:
    """A job this run submitted, once it ended."""
    return Outcome(item, _verdict(job), time.monotonic() - started, job=job,
                   message=(job.get("status") or {}).get("message", ""))


def _refused(item: Item, e: ClientError, started: float) -> Outcome:
    return Outcome(item, "Refused", time.monotonic() - started, message=str(e))


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def save_executed(outcomes: list[Outcome], out_dir: str, root: str) -> list[str]:
    """Each executed notebook into ``out_dir`` at its path as shown (relative to ``root``
    when shown absolute); the files written."""
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
