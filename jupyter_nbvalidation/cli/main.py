"""``jupyter nbvalidation`` — submit, list, describe, events, cancel, delete, gc, install.

Talks to a running Jupyter server through the REST API when one serves the
notebook's folder; otherwise (local backend) works on the same data dir
itself, and ``submit`` runs an engine in this process until the verdict: it
reconciles when it gets the data dir's lease, and otherwise only submits and
waits while the holder (a server or another CLI on the same data dir) works.
Exit code 0 when the job succeeded, 1 when it failed, 2 on a usage or input
error — so ``jupyter nbvalidation submit nb.ipynb --wait`` can gate CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Mapping, Protocol, TypeVar, cast

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.clients.http import ClientError, ServerClient, find_server
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.errors import Conflict, NotFound, StoreBroken, StoreError
from jupyter_nbvalidation.core.model import Phase, Reason, build_enabled, is_terminal
from jupyter_nbvalidation.core.spec_table import cli_options

if TYPE_CHECKING:
    from jupyter_nbvalidation.service.jobs import JobService

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INFRASTRUCTURE = 0, 1, 2, 3
FOLLOW_POLL = 0.5  # seconds between two looks at a job being followed

# a job, a spec, a notebook: JSON objects (batch.Json). The service's Jobs are such plain
# dicts at run time (documents.py): InProcess hands them on as the REST API's answers are
Json = dict[str, Any]
T = TypeVar("T")


class Follower:
    """What ``submit --wait`` and ``describe --follow`` print while a job runs:
    each phase once, the validation's progress as it changes, and (``follow_log``)
    the build log as it grows."""

    def __init__(self, quiet: bool = False, follow_log: bool = False, phase: str | None = None):
        self.quiet = quiet
        self.log_done = quiet or not follow_log
        self.offset = 0
        self.phase = phase
        self.progress: tuple[Any, Any] | None = None

    def update(self, job: dict[str, Any]) -> None:
        if self.quiet:
            return
        st = job.get("status") or {}
        name = job["metadata"]["name"]
        phase = render.phase_label(job)
        if phase != self.phase:
            self.phase = phase
            print(f"{time.strftime('%H:%M:%S')}  {name}  {phase:<18} {st.get('message', '')}", flush=True)
        p = st.get("progress")
        if p and st.get("phase") == Phase.VALIDATION_RUNNING:
            key = (p.get("currentCellIndex"), p.get("cellsDone"))
            if key != self.progress:
                self.progress = key
                print(f"{time.strftime('%H:%M:%S')}  {name}  {'':<18} {render.progress_text(p)}", flush=True)

    def wants_log(self, job: Mapping[str, Any]) -> bool:
        return not self.log_done and build_enabled(job["spec"])

    def log(self, data: bytes, complete: bool, next_offset: int) -> None:
        if data:
            for line in data.decode("utf-8", "replace").splitlines():
                print(f"  build | {line}", flush=True)
        self.offset = next_offset
        self.log_done = self.log_done or complete

    def no_log(self) -> None:
        self.log_done = True


def follow(api: "Remote | InProcess", name: str, follower: Follower, timeout: float | None) -> dict[str, Any]:
    """Poll a job (through the REST API or this process's service) until it is
    terminal, printing what ``follower`` prints; the job as it ended."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        job = api.get(name)
        follower.update(job)
        terminal = is_terminal((job.get("status") or {}).get("phase"))
        if follower.wants_log(job):
            try:
                follower.log(*api.build_log(name, follower.offset))
            except ClientError as e:
                if e.status != 404:
                    raise
                follower.no_log()
        if terminal:
            return job
        if deadline and time.monotonic() > deadline:
            raise ClientError(f"job {name} did not finish within {timeout:.0f}s")
        time.sleep(FOLLOW_POLL)


class ServiceCalls:
    """The job operations over a JobService whose loop runs in another thread than the
    caller's: each a coroutine scheduled on ``loop`` and waited for in the caller's thread,
    never on the loop (an ApiError becomes the ClientError the REST client raises). The
    server's searches use it as it is (bisect_runs); InProcess is one with a loop of its own."""

    def __init__(self, service: "JobService", loop: asyncio.AbstractEventLoop):
        self.service, self.loop = service, loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        from jupyter_nbvalidation.service.errors import ApiError

        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None

    def get(self, name: str) -> dict[str, Any]:
        return cast(Json, self._call(self.service.get(name)))

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(self.service.list_jobs(notebook, limit, None))["items"]
        return items

    def environment(self, name: str) -> dict[str, Any]:
        return self._call(self.service.environment_record(name))

    def changes(self, name: str) -> dict[str, Any]:
        return self._call(self.service.since_last_success(name))

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]:
        """A probe job for ``probe_of`` (bisect's steps): never the notebook's verdict."""
        return cast(Json, self._call(self.service.submit(spec, probe_of=probe_of)))

    def cancel(self, name: str) -> dict[str, Any]:
        return cast(Json, self._call(self.service.cancel(name)))

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """The job once it ended, waited for on the loop (``on_update`` sees each change
        there); ``stop``, once set, ends the wait (ClientError)."""
        from concurrent.futures import wait as wait_for

        from jupyter_nbvalidation.service.errors import ApiError

        running = asyncio.run_coroutine_threadsafe(
            self.service.wait_for_terminal(name, timeout, cast("Callable[[Job], None]", on_update)), self.loop)
        while not running.done():
            wait_for([running], timeout=0.25)
            if not running.done() and stop is not None and stop.is_set():
                running.cancel()
                raise ClientError(f"stopped waiting for job {name}")
        try:
            return cast(Json, running.result())
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None


class InProcess(ServiceCalls):
    """The same operations as the REST API, on the local data dir, in this process."""

    def __init__(self, root_dir: str, data_dir: str | None = None, backend_config: dict[str, Any] | None = None):
        from jupyter_nbvalidation.composition import local_service

        self.loop = asyncio.new_event_loop()
        # the CLI is itself the user's batch work, as pytest --nbmake is: its runners and
        # kernels run at its own priority (a server lowers theirs to stay responsive)
        self.service = local_service(root_dir, data_dir, {"niceness": 0, **(backend_config or {})})
        self.root_dir = root_dir
        self._thread: threading.Thread | None = None  # this process's loop, while a batch runs (begin)
        self.loop.run_until_complete(self.service.open())

    def close(self) -> None:
        self.loop.run_until_complete(self.service.close())
        self.loop.close()

    def begin(self) -> None:
        """A batch starts (``batch.BatchClient``): the engine starts, and this process's loop
        runs on in a thread of its own, so that every call below may come from any thread
        (each blocks its caller until its answer)."""
        self.loop.run_until_complete(self.service.start())
        self._thread = threading.Thread(target=self.loop.run_forever, name="nbvalidation-batch", daemon=True)
        self._thread.start()

    def end(self, interrupted: bool = False) -> None:
        """The batch is over: the data dir handed over (runs this process started end first,
        unless ``interrupted``: it cancelled its own, nothing of ours runs on) and the engine
        stopped; the loop is this thread's again."""
        async def finish() -> None:
            try:
                await self.service.hand_over(drain=not interrupted)
            finally:
                await self.service.stop()

        try:
            self._call(finish())
        finally:
            if self._thread is not None:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join()
                self._thread = None

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        from jupyter_nbvalidation.service.errors import ApiError

        try:
            if self._thread is not None:
                return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
            return self.loop.run_until_complete(coro)
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None

    def api_path(self, local_path: str) -> str:
        return Path(local_path).resolve().relative_to(Path(self.root_dir).resolve()).as_posix()

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return cast(Json, self._call(self.service.submit(spec)))

    def unchanged(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The verdict cache: an earlier Succeeded job standing for ``spec``, or None."""
        return cast("Json | None", self._call(self.service.unchanged(spec)))

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """As ServiceCalls.wait; only while a batch runs (begin)."""
        assert self._thread is not None, "InProcess.wait: only between begin() and end()"
        return super().wait(name, on_update, timeout, stop)

    def executed_notebook(self, name: str) -> dict[str, Any]:
        return self._call(self.service.executed_notebook(name))

    def events(self, name: str) -> list[dict[str, Any]]:
        return cast("list[Json]", self._call(self.service.events(name)))

    def timeline(self, name: str) -> dict[str, Any]:
        return self._call(self.service.timeline(name))

    def lock(self, name: str) -> str:
        return self._call(self.service.lock(name))

    def delete(self, name: str) -> tuple[int, dict[str, Any]]:
        return cast("tuple[int, Json]", self._call(self.service.delete(name)))

    def gc(self, job_ttl: float | None, env_cache_max_bytes: int | None) -> dict[str, Any]:
        return self._call(self.service.gc(job_ttl=job_ttl, env_cache_max_bytes=env_cache_max_bytes))

    def build_log(self, name: str, offset: int) -> tuple[bytes, bool, int]:
        chunk = self._call(self.service.build_log(name, offset))
        return chunk.data, chunk.complete, chunk.next_offset

    async def _follow_log(self, name: str, follower: Follower) -> None:
        """The build log as it grows, while this process's engine runs the job."""
        from jupyter_nbvalidation.service.errors import ApiError

        while True:
            job = await self.service.get(name)
            if follower.wants_log(job):
                try:
                    chunk = await self.service.build_log(name, follower.offset)
                    follower.log(chunk.data, chunk.complete, chunk.next_offset)
                except ApiError as e:
                    if e.status != 404:
                        raise
                    follower.no_log()
            if is_terminal((job.get("status") or {}).get("phase")) or follower.log_done:
                return
            await asyncio.sleep(FOLLOW_POLL)

    def check_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec as this process's service would take it, or ClientError (exit 2)."""
        from jupyter_nbvalidation.service.errors import ApiError

        try:
            return cast(Json, self.service.check_spec(spec))
        except ApiError as e:
            raise ClientError(e.message, e.status, e.field) from None

    async def _wait(self, name: str, follower: Follower, timeout: float | None) -> Job:
        logging_task = asyncio.ensure_future(self._follow_log(name, follower))
        try:
            done = await self.service.wait_for_terminal(name, timeout, cast("Callable[[Job], None]", follower.update))
        finally:
            if not logging_task.done():
                logging_task.cancel()
            await asyncio.gather(logging_task, return_exceptions=True)
        if follower.wants_log(done):  # the rest of the log, once the build ended
            await self._follow_log(name, follower)
        return done

    def run(self, spec: dict[str, Any], follower: Follower, timeout: float | None) -> dict[str, Any]:
        """Submit and wait in this process's engine. Ctrl-C or SIGTERM while it waits: the
        job is cancelled (its runner and kernel end), waited for at most INTERRUPT_GRACE s,
        the lease handed back at once, then :class:`SubmitInterrupted`; a second signal ends
        the process at once."""
        from jupyter_nbvalidation.cli.batch import INTERRUPT_GRACE

        async def go() -> dict[str, Any]:
            await self.service.start()
            try:
                job = await self.service.submit(spec)
                name = job["metadata"]["name"]
                work = asyncio.ensure_future(self._wait(name, follower, timeout))
                with loop_interrupts(work) as came:
                    try:
                        done = await work
                    except asyncio.CancelledError:
                        if not came:
                            raise
                        try:
                            await self.service.cancel(name)
                        except Exception:  # ended meanwhile, or the store is away: the wait tells
                            pass
                        try:
                            left = await self.service.wait_for_terminal(name, INTERRUPT_GRACE)
                        except Exception:
                            left = None
                        await self.service.hand_over(drain=False)
                        raise SubmitInterrupted(name, cast("Json | None", left)) from None
                await self.service.hand_over()
                return cast(Json, done)
            finally:
                await self.service.stop()

        return self._call(go())


class SubmitInterrupted(Exception):
    """Ctrl-C of an in-process ``submit --wait``: its job (as it was left, or None) was cancelled."""

    def __init__(self, name: str, job: dict[str, Any] | None):
        super().__init__(name)
        self.name, self.job = name, job


class Remote:
    """The same operations through a running Jupyter server's REST API (blocking, any thread).
    Its answers are JSON of the shapes openapi.py documents."""

    def __init__(self, client: ServerClient):
        self.client = client

    def begin(self) -> None:
        """A batch starts (``batch.BatchClient``): the server's engine is already running."""

    def end(self, interrupted: bool = False) -> None:
        """The batch is over: nothing of this process to hand over."""

    def executed_notebook(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/notebook"))

    def api_path(self, local_path: str) -> str:
        return self.client.api_path(local_path)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return cast(Json, self.client.request("POST", "jobs", spec))

    def unchanged(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The verdict cache on the server: an earlier Succeeded job standing for ``spec``, or None."""
        return cast("Json | None", self.client.request("POST", "unchanged", spec).get("job"))

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]:
        """A probe job for ``probe_of`` (bisect's steps): never the notebook's verdict."""
        return cast(Json, self.client.request("POST", "jobs", spec, params={"probeOf": probe_of}))

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]:
        return cast("list[Json]", self.client.request("GET", "jobs", params={"notebook": notebook, "limit": limit})["items"])

    def get(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}"))

    def events(self, name: str) -> list[dict[str, Any]]:
        return cast("list[Json]", self.client.request("GET", f"jobs/{name}/events")["items"])

    def timeline(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/timeline"))

    def environment(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/environment"))

    def changes(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/changes"))

    def lock(self, name: str) -> str:
        return cast(str, self.client.request("GET", f"jobs/{name}/lock", raw=True))

    def cancel(self, name: str) -> dict[str, Any]:
        # cancelOnly: a job that has just finished is left as it ended, not deleted
        return cast(Json, self.client.request("DELETE", f"jobs/{name}", params={"cancelOnly": "true"}))

    def delete(self, name: str) -> tuple[int, dict[str, Any]]:
        job = self.get(name)
        answer = self.client.request("DELETE", f"jobs/{name}")
        return (200 if is_terminal((job.get("status") or {}).get("phase")) else 202), answer

    def build_log(self, name: str, offset: int) -> tuple[bytes, bool, int]:
        return self.client.build_log(name, offset)

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """Polls until the job ended; ``stop``, once set, ends the wait (ClientError)."""
        deadline = time.monotonic() + timeout if timeout else None
        last = None
        while True:
            if stop is not None and stop.is_set():
                raise ClientError(f"stopped waiting for job {name}")
            job = self.get(name)
            version = job["metadata"].get("resourceVersion")
            if version != last:
                on_update(job)
                last = version
            if is_terminal((job.get("status") or {}).get("phase")):
                return job
            if deadline and time.monotonic() > deadline:
                raise ClientError(f"job {name} did not finish within {timeout:.0f}s")
            if stop is not None:
                stop.wait(0.5)
            else:
                time.sleep(0.5)


def _say_outside(path: str) -> None:
    """Never switch to this process silently: when a server runs for the current folder
    but ``path`` is outside its root, say that this process validates it instead."""
    here = find_server(os.getcwd())
    if here is not None:
        print(f"jupyter nbvalidation: {path} is outside the root of the server at {here.get('url')} "
              f"({here.get('root_dir') or here.get('notebook_dir')}): validating it in this process, "
              "with its own engine; that server will not show these jobs", file=sys.stderr)


def connect(args: argparse.Namespace, path_hint: str | None = None,
            backend_config: dict[str, Any] | None = None) -> Remote | InProcess:
    if args.server:
        return Remote(ServerClient(args.server, args.token or os.environ.get("JUPYTER_TOKEN", ""), args.root_dir))
    if not args.local:
        info = find_server(path_hint or os.getcwd())
        if info is not None:
            return Remote(ServerClient.from_info(info))
        if path_hint:
            _say_outside(path_hint)
    root = args.root_dir or os.getcwd()
    if path_hint:
        hint = Path(path_hint).resolve()
        if Path(root).resolve() not in hint.parents:
            root = str(hint.parent)
    return InProcess(root, args.data_dir, backend_config)


def parameter_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value: JSON when it parses (``1``, ``0.5``, ``true``,
    ``[1, 2]``, ``{"a": 1}``), papermill's ``True`` / ``False`` / ``None``, else
    the text itself as a string."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_sanitizer_file(path: str) -> list[dict[str, Any]]:
    """An nbval sanitizer file as ``comparisonConfig.sanitizers`` entries; a
    ClientError (exit 2) naming the file and the line when it cannot be read."""
    from jupyter_nbvalidation.verdict.compare import SanitizerFileError, parse_sanitizer_file

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ClientError(f"--sanitize-with {path}: cannot be read: {e}") from None
    try:
        return parse_sanitizer_file(text)
    except SanitizerFileError as e:
        raise ClientError(f"--sanitize-with {path}:{e.line}: {e.reason}") from None


def add_spec_options(s: argparse.ArgumentParser) -> None:
    """The options that become spec fields (:func:`spec_from_options`), shared by ``submit``,
    ``run``, ``%nbvalidate`` and ``--nbvalidation-option``: the table's (spec_table.py, ``cli=``)."""
    for _path, field, opt in cli_options():
        kwargs: dict[str, Any] = {"help": opt.help}
        if opt.dest:
            kwargs["dest"] = opt.dest
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
        if opt.action in ("set_true", "set_false"):
            kwargs["action"] = "store_true"
        elif opt.action in ("append", "sanitizer_file"):
            kwargs["action"] = "append"
        elif opt.action in ("parameter", "raw_parameter"):
            kwargs.update(nargs=2, action="append")
        elif opt.action == "float":
            kwargs["type"] = float
        elif opt.action == "choice":
            kwargs["choices"] = list(field.limit)
        s.add_argument(*opt.flags, **kwargs)


def _option_value(action: str, given: Any) -> Any:
    """What an option given on the command line puts into its spec field (spec_table.CLI_ACTIONS)."""
    if action == "set_true":
        return True
    if action == "set_false":
        return False
    if action == "duration":
        return duration_arg(given)
    if action == "parameter":
        return {name: parameter_value(value) for name, value in given}
    if action == "raw_parameter":
        return dict(given)
    if action == "sanitizer_file":
        return [entry for path in given for entry in read_sanitizer_file(path)]
    return given  # value, float, choice, append


def spec_from_options(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields the shared spec options (:func:`add_spec_options`) give, without
    the notebook and golden paths: one translation for ``submit``, ``run``, the magic
    and the pytest plugin, so an option added there applies to all of them. Raises
    ClientError (exit 2) for a sanitizer file that cannot be read."""
    spec: dict[str, Any] = {}
    for path, _field, opt in cli_options():
        given = getattr(args, opt.attr, None)
        if given is None or given is False or given == [] or given == "":
            continue
        value = _option_value(opt.action, given)
        *parents, leaf = path.split(".")
        cur = spec
        for part in parents:
            cur = cur.setdefault(part, {})
        if isinstance(cur.get(leaf), dict) and isinstance(value, dict):
            cur[leaf] = {**cur[leaf], **value}  # -p and -r both give parameters
        elif isinstance(cur.get(leaf), list) and isinstance(value, list):
            cur[leaf] = [*cur[leaf], *value]
        else:
            cur[leaf] = value
    return spec


def duration_arg(value: str) -> str:
    """A duration option: ``10m`` as it is, a plain number of seconds as ``60s``."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:g}s" if number == number and number not in (float("inf"), float("-inf")) else value


def build_spec(args: argparse.Namespace, api: Remote | InProcess) -> dict[str, Any]:
    spec: dict[str, Any] = {"notebook": {"path": api.api_path(args.notebook)}}
    if args.golden:
        spec["goldenNotebook"] = {"path": api.api_path(args.golden)}
    spec.update(spec_from_options(args))
    if getattr(args, "constraints_from_last_success", False):
        pins, said = last_success_constraints(api, spec["notebook"]["path"])
        _add_constraints(spec, pins)
        if args.output != "json":
            print(f"{args.notebook}: {said}", flush=True)
    return spec


class JobLister(Protocol):
    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]: ...


def newest_job(api: JobLister, path: str, phase: str, limit: int = 500) -> dict[str, Any] | None:
    """The notebook's newest job (a summary) that ended in ``phase`` (probes are not listed), or None."""
    for job in api.list_jobs(path, limit):
        if (job.get("status") or {}).get("phase") == phase:
            return job
    return None


def last_success(api: Remote | InProcess, path: str) -> dict[str, Any] | None:
    """The notebook's newest Succeeded job, or None."""
    return newest_job(api, path, Phase.SUCCEEDED)


def last_success_constraints(api: Remote | InProcess, path: str) -> tuple[list[str], str]:
    """``--constraints-from-last-success``: (the ``name==version`` pins of the environment
    of the notebook's last success, a sentence saying what they are). No earlier success:
    no pins, and the sentence says so (the notebook is validated as declared). A last
    success whose environment has no lock is an error (ClientError): asked to keep its
    versions, validating without them would not be what was asked."""
    import jupyter_nbvalidation.why_red.lock as environment_lock

    job = last_success(api, path)
    if job is None:
        return [], "no earlier success: validated with its declared requirements only"
    name = job["metadata"]["name"]
    try:
        record = api.environment(name)
        pins, left_out = environment_lock.constraint_lines(record)
    except ClientError as e:
        raise ClientError(f"--constraints-from-last-success: {path}'s last success, job {name}, has no "
                          f"environment record: {e}") from None
    except environment_lock.NoLock as e:
        raise ClientError(f"--constraints-from-last-success: {path}'s last success, job {name}, cannot be "
                          f"pinned: {e}") from None
    when = (job.get("status") or {}).get("completionTime") or ""
    said = f"constrained to the {len(pins)} versions of its last success (job {name}{', ' + when if when else ''})"
    if left_out:
        said += f"; not from an index, so not constrained: {', '.join(left_out[:5])}" + (
            f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
    return pins, said


def _add_constraints(spec: dict[str, Any], pins: list[str]) -> None:
    if not pins:
        return
    bc = spec.setdefault("podConfig", {}).setdefault("buildConfig", {})
    given = list(bc.get("constraints") or [])
    bc["constraints"] = given + pins  # the user's own --constraint first: an equal name conflicts loudly


def _out(args: argparse.Namespace, obj: Any, text: str) -> None:
    print(json.dumps(obj, indent=2) if args.output == "json" else text)


def cmd_submit(args: argparse.Namespace) -> int:
    if not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    keep = _keep_outputs_dir(args.keep_outputs, [(Path(args.notebook), args.notebook)]) if args.keep_outputs else None
    api = connect(args, args.notebook, {"keep_outputs_dir": keep} if keep else None)
    _ready_keep_outputs(args, api, keep)
    spec = build_spec(args, api)
    quiet = args.output == "json"
    follower = Follower(quiet, follow_log=args.follow_build_log)

    if isinstance(api, InProcess):
        if not args.wait and not quiet:
            print("No running Jupyter server serves this folder; validating in this process.", flush=True)
        try:
            job = api.run(spec, follower, args.wait_timeout)
        except SubmitInterrupted as e:
            phase = ((e.job or {}).get("status") or {}).get("phase")
            said = (f"cancelled: {render.verdict_line(e.job)}" if e.job is not None and is_terminal(phase)
                    else "cancelled")
            print(f"\ninterrupted: job {e.name} {said}", file=sys.stderr, flush=True)
            return 130
        finally:
            api.close()
    else:
        job = api.submit(spec)
        if not args.wait:
            _out(args, job, f"{job['metadata']['name']} submitted")
            return EXIT_OK
        name = job["metadata"]["name"]
        with interrupt_signals():
            try:
                job = follow(api, name, follower, args.wait_timeout)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the job is cancelled on the server, not left running
                return _cancel_interrupted(api, name)
    if quiet:
        print(json.dumps(job, indent=2))
    else:
        print(render.verdict_line(job))
        if (job.get("status") or {}).get("phase") == Phase.FAILED:
            for line in render.environment_lines(job):
                print(line)
        for line in render.failure_lines(job):
            print(line)
    return verdict_exit_code(job)


@contextlib.contextmanager
def interrupt_signals() -> Any:
    """While inside: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (the
    caller cancels what it started), and a second one ends the process at once (exit 130).
    Outside the main thread, nothing changes."""
    came: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        came.append(signum)
        if len(came) > 1:
            os._exit(130)  # the user insists: no more waiting
        raise KeyboardInterrupt

    old = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, on_signal)
    except ValueError:  # not the main thread
        pass
    try:
        yield came
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def loop_interrupts(work: "asyncio.Future[Any]") -> Any:
    """SIGINT and SIGTERM, while ``work`` runs on this thread's loop (an in-process
    ``submit --wait``): the first cancels it (the caller then cancels its job), a second
    one ends the process at once (exit 130). Yields a list that is non-empty once a
    signal came."""
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


def _cancel_interrupted(api: Remote, name: str) -> int:
    """After Ctrl-C of ``submit --wait`` through a server: the job is cancelled there (its
    build or its runner and kernel stop), the state it was left in is printed; exit 130."""
    try:
        job = api.cancel(name)
        phase = (job.get("status") or {}).get("phase") or "Pending"
        said = f"cancelled (it was {phase})" if not is_terminal(phase) else f"had ended: {render.verdict_line(job)}"
    except ClientError as e:
        said = f"could not be cancelled: {e}"
    print(f"\ninterrupted: job {name} {said}", file=sys.stderr, flush=True)
    return 130


def verdict_exit_code(job: dict[str, Any]) -> int:
    """0 succeeded, 3 an infrastructure fault (not the notebook's), else 1."""
    st = job.get("status") or {}
    if st.get("phase") == Phase.SUCCEEDED:
        return EXIT_OK
    return EXIT_INFRASTRUCTURE if st.get("reason") == Reason.INFRASTRUCTURE_FAILED else EXIT_FAILED


def _connect_batch(args: argparse.Namespace, folder: str, jobs: int,
                   backend_config: dict[str, Any] | None = None) -> Remote | InProcess:
    """Like ``connect`` for a folder holding every notebook of a batch; in this process,
    the engine runs up to ``jobs`` validations at once (and the backend gets ``backend_config``)."""
    if args.server:
        return Remote(ServerClient(args.server, args.token or os.environ.get("JUPYTER_TOKEN", ""), args.root_dir))
    if not args.local:
        info = find_server(folder)
        if info is not None:
            return Remote(ServerClient.from_info(info))
        _say_outside(folder)
    root = Path(args.root_dir or os.getcwd()).resolve()
    target = Path(folder).resolve()
    if target != root and root not in target.parents:
        root = target
    return InProcess(str(root), args.data_dir,
                     {"max_parallel_validations": jobs, "max_parallel_builds": max(1, min(jobs, 2)),
                      **(backend_config or {})})


def _keep_outputs_dir(given: str, notebooks: list[tuple[Path, str]]) -> str:
    """--keep-outputs DIR: absolute, never inside the folder of a notebook validated
    (path, as shown): what it writes would become part of that folder; or ClientError (exit 2)."""
    target = Path(given).resolve()
    for path, shown in notebooks:
        folder = path.resolve().parent
        if target == folder or folder in target.parents:
            raise ClientError(f"--keep-outputs {given}: inside the folder of {shown}, which is validated; "
                              "choose a folder outside the notebooks' folders")
    return str(target)


def _ready_keep_outputs(args: argparse.Namespace, api: Remote | InProcess, keep: str | None) -> None:
    """--keep-outputs needs this process's engine (the files stay where the kernel ran);
    the folder is made now, so one that cannot be is refused before anything runs."""
    if not keep:
        return
    if not isinstance(api, InProcess):
        raise ClientError(f"--keep-outputs {args.keep_outputs}: the files a notebook writes stay with the server "
                          f"at {api.client.url}; give --local to validate in this process")
    try:
        Path(keep).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        api.close()
        raise ClientError(f"--keep-outputs {args.keep_outputs}: {e.strerror}") from None


def cmd_run(args: argparse.Namespace) -> int:
    import jupyter_nbvalidation.cli.batch as batch
    import jupyter_nbvalidation.cli.reports.console as console
    from jupyter_nbvalidation.core.spec_checks import SpecError, validate_spec

    if args.jobs is not None and args.jobs < 1:
        raise ClientError(f"-j/--jobs {args.jobs}: give at least 1")
    jobs = args.jobs or os.cpu_count() or 1
    try:
        items = batch.discover(args.paths, args.exclude, args.golden_suffix, args.golden_self)
    except batch.BatchInputError as e:
        raise ClientError(str(e)) from None
    options = spec_from_options(args)
    try:  # a bad option is refused once, before anything is submitted
        validate_spec({"notebook": {"path": "check.ipynb"}, **options})
    except SpecError as e:
        raise ClientError(f"spec.{e.field}: {e.reason}") from None
    for flag, folder in (("--junitxml", args.junitxml and Path(args.junitxml).parent),
                         ("--html", args.html and Path(args.html).parent), ("--output-dir", args.output_dir)):
        try:  # made now (as pytest does for --junitxml): one that cannot be is refused before anything runs
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ClientError(f"{flag} {getattr(args, flag[2:].replace('-', '_'))}: {e.strerror}") from None
    keep = (_keep_outputs_dir(args.keep_outputs, [(item.path, item.shown) for item in items])
            if args.keep_outputs else None)
    api = _connect_batch(args, batch.common_root(items), jobs, {"keep_outputs_dir": keep} if keep else None)
    _ready_keep_outputs(args, api, keep)
    if isinstance(api, InProcess):
        try:
            api.check_spec({"notebook": {"path": "check.ipynb"}, **options})
        except ClientError:
            api.close()
            raise

    quiet = args.output == "json"
    pinned: dict[str, list[str]] = {}
    if args.constraints_from_last_success:  # asked once per notebook, before anything is submitted
        try:
            for item in items:
                path = api.api_path(str(item.path))
                pinned[path], said = last_success_constraints(api, path)
                print(f"{item.shown}: {said}", file=sys.stderr if quiet else sys.stdout, flush=True)
        except ClientError:
            if isinstance(api, InProcess):
                api.close()
            raise

    def make_spec(item: batch.Item) -> dict[str, Any]:
        spec: dict[str, Any] = {"notebook": {"path": api.api_path(str(item.path))}}
        if item.golden is not None:
            spec["goldenNotebook"] = {"path": api.api_path(str(item.golden))}
        spec.update(json.loads(json.dumps(options)))
        _add_constraints(spec, pinned.get(spec["notebook"]["path"], []))
        return spec

    where = ("in this process" if isinstance(api, InProcess) else f"through the Jupyter server at {api.client.url}")
    if not quiet:
        print(f"Validating {len(items)} notebook(s), up to {jobs} at a time, {where}.", flush=True)
    progress = console.Progress(len(items), sys.stderr if quiet else sys.stdout)
    interrupted = False
    started = time.monotonic()  # the run's wall time: JUnit's <testsuite time> (the notebooks ran in parallel)
    # SIGTERM is a Ctrl-C too, and a second one aborts at once
    try:
        with interrupt_signals():
            outcomes = batch.run_batch(api, items, make_spec,
                                       batch.Options(jobs=jobs, timeout=args.wait_timeout,
                                                     keep_executed=bool(args.output_dir),
                                                     use_cache=not args.no_cache), progress)
    except batch.Interrupted as e:  # Ctrl-C: the jobs this run submitted are cancelled, report what ended
        outcomes, interrupted = e.outcomes, True
        print("\ninterrupted: the jobs that had not ended were cancelled", file=sys.stderr, flush=True)
    finally:
        if isinstance(api, InProcess):
            api.close()
    if args.junitxml:
        import jupyter_nbvalidation.cli.reports.junit as junit

        junit.write(outcomes, args.junitxml, wall=time.monotonic() - started)
    if args.html:
        import jupyter_nbvalidation.cli.reports.html as html

        html.write(outcomes, args.html)
    if args.output_dir:
        batch.save_executed(outcomes, args.output_dir, batch.common_root(items))
    if quiet:
        print(json.dumps([{"notebook": o.item.shown, "verdict": o.verdict, "seconds": round(o.seconds, 3),
                           "job": o.name, "firstFailure": console.first_failure(o), "environment": o.environment,
                           "sinceLastSuccess": o.changes if (o.changes or {}).get("since") else None}
                          for o in outcomes], indent=2))
    else:
        print()
        print(console.summary(outcomes))
    return 130 if interrupted else batch.exit_code(outcomes)


def cmd_list(args: argparse.Namespace) -> int:
    api = connect(args)
    notebook = api.api_path(args.notebook) if args.notebook else None
    jobs = api.list_jobs(notebook, args.limit)
    _out(args, {"items": jobs}, render.job_rows(jobs))
    return EXIT_OK


def _if_found(get: Callable[[str], dict[str, Any]], name: str) -> dict[str, Any] | None:
    """``get(name)``, or None when it answers 404 (nothing recorded, or not on this backend)."""
    try:
        return get(name)
    except ClientError as e:
        if e.status != 404:
            raise
        return None


def cmd_describe(args: argparse.Namespace) -> int:
    api = connect(args)
    job, timeline, events = api.get(args.name), api.timeline(args.name), api.events(args.name)
    environment, since = _if_found(api.environment, args.name), None
    if is_terminal((job.get("status") or {}).get("phase")):
        since = _if_found(api.changes, args.name)
    _out(args, {"job": job, "timeline": timeline, "events": events, "environment": environment, "changes": since},
         render.describe(job, timeline, events) + render.environment_block(job, environment)
         + render.changes_block(since))
    if getattr(args, "follow", False) and args.output != "json":
        # then the build log as it grows, the phases and the progress, until the verdict
        follower = Follower(follow_log=True, phase=render.phase_label(job))
        if not is_terminal((job.get("status") or {}).get("phase")):
            job = follow(api, args.name, follower, None)
            print(render.verdict_line(job))
            for line in render.failure_lines(job):
                print(line)
        elif follower.wants_log(job):
            print("Build log:")
            try:
                follower.log(*api.build_log(args.name, 0))
            except ClientError as e:
                if e.status != 404:
                    raise
                print("  <none>")
    return EXIT_OK


def cmd_bisect(args: argparse.Namespace) -> int:
    import jupyter_nbvalidation.why_red.bisect as bisect_cmd

    return bisect_cmd.cmd_bisect(args)


def cmd_lock(args: argparse.Namespace) -> int:
    if not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    api = connect(args, args.notebook)
    try:
        path = api.api_path(args.notebook)
        if args.job:
            job = api.get(args.job)
            if job["spec"]["notebook"]["path"] != path:
                raise ClientError(f"job {args.job} is of {job['spec']['notebook']['path']}, not of {path}")
        else:
            found = last_success(api, path)
            if found is None:
                raise ClientError(f"{path} has no Succeeded job to pin (validate it first)")
            job = found
        text = api.lock(job["metadata"]["name"])
    finally:
        if isinstance(api, InProcess):
            api.close()
    if not args.lock_file or args.lock_file == "-":
        sys.stdout.write(text)
        return EXIT_OK
    try:
        Path(args.lock_file).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ClientError(f"-o {args.lock_file}: {e.strerror}") from None
    print(f"wrote the {sum(1 for ln in text.splitlines() if ln and not ln.startswith(('#', '-')))} pins of job "
          f"{job['metadata']['name']} to {args.lock_file}", file=sys.stderr)
    return EXIT_OK


def cmd_events(args: argparse.Namespace) -> int:
    api = connect(args)
    events = api.events(args.name)
    _out(args, {"items": events}, render.events_table(events))
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    api = connect(args)
    job = api.cancel(args.name)
    _out(args, job, f"{args.name}: cancellation requested")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    api = connect(args)
    code, answer = api.delete(args.name)
    if code == 202:
        _out(args, answer, f"{args.name}: still running; cancellation requested (delete it once it has finished)")
    else:
        _out(args, answer, f"{args.name}: deleted (job, events and files)")
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    root = args.root_dir or os.getcwd()
    api = InProcess(root, args.data_dir)
    try:
        report = api.gc(args.job_ttl, args.env_cache_max_bytes)
    finally:
        api.close()
    lines = [f"removed job {j['name']} (finished {j['completionTime']})" for j in report["jobs"]]
    lines += [f"removed leftover job folder {d}" for d in report["orphanDirs"]]
    lines += [f"removed environment {e['key']} ({e['bytes'] / 2**20:.1f} MiB, last used {e['lastUse']})"
              for e in report["envs"]]
    lines.append(f"{len(report['jobs'])} job(s), {len(report['envs'])} environment(s) removed; "
                 f"environment cache {report['envCacheBytes'] / 2**20:.1f} MiB")
    _out(args, report, "\n".join(lines))
    return EXIT_OK


def cmd_install(args: argparse.Namespace) -> int:
    from jupyter_nbvalidation.backends.kubernetes.install import install

    return install(namespace=args.namespace, print_only=args.print, kubeconfig=args.kubeconfig)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jupyter nbvalidation", description=__doc__.split("\n\n")[0])
    reach = argparse.ArgumentParser(add_help=False)  # where the jobs are
    reach.add_argument("--server", help="URL of a Jupyter server (default: discovered from runtime files)")
    reach.add_argument("--token", help="that server's token (default: $JUPYTER_TOKEN)")
    reach.add_argument("--local", action="store_true", help="never use a running server; work on the data dir")
    reach.add_argument("--root-dir", help="root for notebook paths (default: the server's, or the current dir)")
    reach.add_argument("--data-dir", help="local backend data dir (default: <jupyter data dir>/nbvalidation)")
    common = argparse.ArgumentParser(add_help=False, parents=[reach])
    common.add_argument("--output", "-o", choices=["text", "json"], default="text")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("submit", parents=[common], help="validate a notebook")
    s.add_argument("notebook")
    s.add_argument("--golden", help="golden notebook to compare outputs with")
    add_spec_options(s)
    s.add_argument("--constraints-from-last-success", action="store_true",
                   help="keep every package at the version the notebook's last success had, wherever its "
                        "requirements allow (its pins as spec.podConfig.buildConfig.constraints)")
    s.add_argument("--wait", action="store_true", help="wait for the verdict; exit 0 only if it succeeded")
    s.add_argument("--wait-timeout", type=float, default=None, help="give up waiting after this many seconds")
    s.add_argument("--follow-build-log", "--follow", action="store_true",
                   help="with --wait: print the environment build log as it is written")
    s.add_argument("--keep-outputs", metavar="DIR",
                   help="copy the files the notebook created or changed in its working copy to "
                        "DIR/<notebook path without .ipynb>/ (in this process only: with --local or no server)")
    s.set_defaults(func=cmd_submit)

    s = sub.add_parser("run", parents=[common], help="validate many notebooks, each as its own job, in parallel")
    s.add_argument("paths", nargs="+", metavar="PATH", help="notebooks, folders (recursive) or globs")
    s.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave out notebooks whose path, file name or a folder of it matches (repeatable)")
    s.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="validate up to N notebooks at a time (default: the number of cores)")
    golden = s.add_mutually_exclusive_group()
    golden.add_argument("--golden-suffix", metavar="SUFFIX",
                        help="compare NB.ipynb with NB<SUFFIX>.ipynb beside it when there is one "
                             "(e.g. .golden); golden copies are not validated themselves")
    golden.add_argument("--golden-self", action="store_true",
                        help="compare each notebook with its own stored outputs (as nbval does)")
    s.add_argument("--constraints-from-last-success", action="store_true",
                   help="keep every package at the version each notebook's last success had, wherever its "
                        "requirements allow (its pins as spec.podConfig.buildConfig.constraints)")
    s.add_argument("--no-cache", action="store_true",
                   help="run every notebook, also one unchanged since an earlier job succeeded with it")
    s.add_argument("--junitxml", metavar="FILE", help="write JUnit XML: one testcase per notebook")
    s.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    s.add_argument("--output-dir", metavar="DIR", help="save each executed notebook there (same relative paths)")
    s.add_argument("--keep-outputs", metavar="DIR",
                   help="copy the files each notebook created or changed in its working copy to "
                        "DIR/<notebook path without .ipynb>/ (in this process only: with --local or no server)")
    add_spec_options(s)
    s.add_argument("--wait-timeout", type=float, default=None,
                   help="give up waiting for a notebook after this many seconds")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("list", parents=[common], help="list jobs, newest first")
    s.add_argument("--notebook", help="only jobs of this notebook")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=cmd_list)
    s = sub.add_parser("bisect", parents=[common],
                       help="which package changes since the last success turned a notebook red: re-validates "
                            "with the last success's exact pins, then searches the changed distributions "
                            "(each step a probe job, hidden from the notebook's job list)")
    s.add_argument("notebook")
    s.add_argument("--job", help="the failing job to explain (default: the notebook's newest Failed job)")
    s.add_argument("--max-steps", type=int, default=12, metavar="N",
                   help="at most N validations in all (default: 12)")
    s.add_argument("--step-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up waiting for one step after this many seconds")
    s.set_defaults(func=cmd_bisect)
    s = sub.add_parser("lock", parents=[reach],
                       help="write the exact pins of the environment of a notebook's last success as a "
                            "requirements file (uv pip install -r / pip install -r take it)")
    s.add_argument("notebook")
    s.add_argument("--job", help="the job whose environment to pin (default: the notebook's last success)")
    s.add_argument("-o", "--output", dest="lock_file", metavar="FILE",
                   help="write it to FILE (default: print it; - prints it)")
    s.set_defaults(func=cmd_lock)
    for name, func, help_ in [("describe", cmd_describe, "status, timeline and events of a job"),
                              ("events", cmd_events, "a job's events"),
                              ("cancel", cmd_cancel, "cancel a job"),
                              ("delete", cmd_delete, "delete a finished job with its events and files "
                                                     "(a running one is cancelled)")]:
        s = sub.add_parser(name, parents=[common], help=help_)
        s.add_argument("name")
        if name == "describe":
            s.add_argument("--follow", "-f", action="store_true",
                           help="then print the build log as it grows and the progress, until the verdict")
        s.set_defaults(func=func)
    s = sub.add_parser("gc", parents=[common],
                       help="local backend: remove finished jobs past their retention and evict "
                            "least-recently-used environments over the cache cap; prints what it removed")
    s.add_argument("--job-ttl", type=float, default=None, metavar="SECONDS",
                   help="remove jobs finished more than this long ago (default: LocalBackend.job_ttl; 0 keeps all)")
    s.add_argument("--env-cache-max-bytes", type=int, default=None, metavar="BYTES",
                   help="evict environments above this cache size (default: LocalBackend.env_cache_max_bytes; "
                        "0: no cap)")
    s.set_defaults(func=cmd_gc)
    s = sub.add_parser("install", help="apply (or print) the CRD and Role on a cluster")
    s.add_argument("--namespace", "-n", default=None)
    s.add_argument("--print", action="store_true", help="print the YAML instead of applying it")
    s.add_argument("--kubeconfig", default=None)
    s.set_defaults(func=cmd_install)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rc: int = args.func(args)  # a cmd_* function (set_defaults in parser())
        return rc
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except StoreError as e:
        if isinstance(e, (NotFound, Conflict)):
            raise
        # the data dir's store cannot be read or written: not the notebook's fault, not the user's input
        where = getattr(args, "data_dir", None) or "the default data dir"
        hint = ("; move its nbvalidation.db aside to start with an empty store" if isinstance(e, StoreBroken)
                else "; try again")
        print(f"error: the job store in {where} is not usable: {e}{hint}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
