"""``jupyter nbvalidation bisect NOTEBOOK`` (issue 22): which package changes since the
notebook's last success turned it red.

Step 1 validates the notebook as it is now with the last success's exact pins: still red
means the change is in the notebook. Then cause_search.ddmin searches the changed
distributions, each step a real validation job submitted as a *probe* of the failing job
(annotation nbvalidation.dev/probe-of): the notebook's job list, verdict cache and last
success never show one. Exits: 0 a culprit set found, 1 none (or the notebook itself
changed), 2 cannot bisect (no earlier success, no environment records, Kubernetes),
3 the last success's environment cannot be built (or a step ended by infrastructure),
130 interrupted (the running step's job cancelled).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import jupyter_nbvalidation.why_red.cause_search as cs
from jupyter_nbvalidation.cli.main import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INFRASTRUCTURE,
    EXIT_OK,
    InProcess,
    Remote,
    connect,
    interrupt_signals,
    newest_job,
)
from jupyter_nbvalidation.clients.http import ClientError
from jupyter_nbvalidation.core.model import Phase, is_terminal
from jupyter_nbvalidation.core.vocabulary import Reason

INTERRUPT_GRACE = 3.0


class Stop(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def _find_failing(api: "SearchClient", path: str, name: str | None) -> dict[str, Any]:
    if name:
        job = api.get(name)
        if job["spec"]["notebook"]["path"] != path:
            raise Stop(EXIT_ERROR, f"job {name} is of {job['spec']['notebook']['path']}, not of {path}")
        if _phase(job) != Phase.FAILED:
            raise Stop(EXIT_ERROR, f"job {name} did not fail ({_phase(job) or 'Pending'}): nothing to bisect")
        return job
    found = newest_job(api, path, Phase.FAILED)
    if found is None:
        raise Stop(EXIT_ERROR, f"{path} has no Failed job to bisect")
    return api.get(found["metadata"]["name"])


def _record(api: "SearchClient", name: str) -> dict[str, Any]:
    try:
        rec = api.environment(name)
    except ClientError as e:
        if e.status == 404:
            raise Stop(EXIT_ERROR, f"cannot bisect: {e}") from None
        raise
    if rec.get("error"):
        raise Stop(EXIT_ERROR, f"cannot bisect: job {name}'s environment record is incomplete ({rec['error']})")
    if (rec.get("environment") or {}).get("kind") != "built":
        raise Stop(EXIT_ERROR, f"cannot bisect: job {name} ran in an interpreter it did not build "
                               "(no declared requirements to pin)")
    return rec


def _probe_spec(failing: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(failing["spec"])
    bc = spec.setdefault("podConfig", {}).setdefault("buildConfig", {})
    bc.pop("requirementsFile", None)  # the pinned list replaces whatever the notebook declared
    bc.pop("constraints", None)  # and whatever it constrained: the pins are exact
    bc["requirements"] = lines
    return spec


def cmd_bisect(args: argparse.Namespace) -> int:
    if not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    if args.max_steps < 1:
        raise ClientError("--max-steps must be at least 1")
    api = connect(args, args.notebook)
    quiet = args.output == "json"
    try:
        return _bisect(args, api, quiet)
    except Stop as e:
        if quiet:
            print(json.dumps({"result": "error", "exitCode": e.code, "message": e.message}, indent=2))
        print(f"bisect: {e.message}", file=sys.stderr)
        return e.code
    finally:
        if isinstance(api, InProcess):
            api.close()


def _bisect(args: argparse.Namespace, api: Remote | InProcess, quiet: bool) -> int:
    """The command: the search in this process (the engine too, without a server), its
    steps printed as they end, Ctrl-C cancelling the running step."""
    path = api.api_path(args.notebook)
    current: list[str | None] = [None]

    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    started = isinstance(api, InProcess)
    if isinstance(api, InProcess):
        api.begin()
    interrupted = False
    try:
        with interrupt_signals():
            try:
                result = search(api, path, args.job, args.max_steps, args.step_timeout, say, current)
            except KeyboardInterrupt:
                interrupted = True
                return _interrupted(api, current[0])
    finally:
        if started and isinstance(api, InProcess):
            api.end(interrupted=interrupted)
    if quiet:
        print(json.dumps(result, indent=2))
    else:
        for n in result["notes"]:
            print(f"note: {n}")
        print(result["message"])
    return int(result["exitCode"])


class SearchClient(Protocol):
    """What the search needs of a client, one shape for the three that give it: ``cli.Remote``
    (a server's REST API), ``cli.InProcess`` (this process's engine) and, in the server,
    ``cli.ServiceCalls`` (the service itself, in the server). Every call blocks its caller; a refusal
    is a ClientError."""

    def get(self, name: str) -> dict[str, Any]: ...

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]: ...

    def changes(self, name: str) -> dict[str, Any]: ...

    def environment(self, name: str) -> dict[str, Any]: ...

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]: ...

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]: ...

    def cancel(self, name: str) -> dict[str, Any]: ...


def search(api: SearchClient, path: str, job_name: str | None, max_steps: int, step_timeout: float | None,
           say: Callable[[str], None], current: list[str | None], stop: threading.Event | None = None,
           on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Which package changes since the last success turned ``path``'s failing job (its newest,
    or ``job_name``) red: the result document (``result``, ``exitCode``, ``culprits``, ``steps``,
    ``message`` …; what ``bisect -o json`` prints and ``GET /jobs/{name}/bisect`` serves).
    ``api``: the blocking job operations (cli.Remote, cli.InProcess, or the server's own,
    cli.ServiceCalls), called from this thread. ``current[0]`` is the running step's
    job; ``stop``, once set, ends the wait for it (ClientError: the caller cancels it);
    ``on_step`` sees each step as it ends. Raises Stop when it cannot bisect."""
    failing = _find_failing(api, path, job_name)
    fname = failing["metadata"]["name"]
    try:
        since = api.changes(fname)
    except ClientError as e:
        if e.status == 404:
            raise Stop(EXIT_ERROR, f"cannot bisect here: {e} (bisect needs the environment records "
                                   "of the last success and of the failing job)") from None
        raise
    if not since.get("since"):
        raise Stop(EXIT_ERROR, f"cannot bisect job {fname}: {path} has no earlier success to compare with")
    sname = since["since"]["name"]
    rec_s, rec_f = _record(api, sname), _record(api, fname)
    declared = list((rec_f.get("environment") or {}).get("requirements") or [])
    changes = cs.changed_distributions(rec_s, rec_f)
    by_name = {c.name: c for c in changes}
    order = [c.name for c in changes]
    notes: list[str] = []

    say(f"bisect {path}: failing job {fname}, last success {sname}")
    say(f"changed since: {since.get('sentence', '')}")
    runs: list[dict[str, Any]] = []

    def validate(moved: list[str]) -> tuple[str, Any]:
        lines, why = cs.pinned_requirements(rec_s, rec_f, moved, declared)
        for n in why:
            if n not in notes:
                notes.append(n)
        job = api.submit_probe(_probe_spec(failing, lines), fname)
        name = job["metadata"]["name"]
        current[0] = name
        done = api.wait(name, lambda j: None, step_timeout, stop)
        current[0] = None
        st = done.get("status") or {}
        if st.get("phase") == Phase.SUCCEEDED:
            outcome = cs.PASS
        elif st.get("reason") in (Reason.BUILD_FAILED, Reason.BUILD_TIMED_OUT):
            outcome = cs.UNRESOLVED
        elif st.get("reason") == Reason.CANCELLED:  # by someone else: no verdict to go on
            raise Stop(130, f"step job {name} was cancelled")
        elif st.get("reason") == Reason.INVALID_INPUT:
            raise Stop(EXIT_ERROR, f"step job {name} was refused: {st.get('message', '')}")
        elif st.get("phase") == Phase.FAILED and st.get("reason") != Reason.INFRASTRUCTURE_FAILED:
            outcome = cs.FAIL
        else:
            raise Stop(EXIT_INFRASTRUCTURE, f"step job {name} ended {st.get('phase')} ({st.get('reason')}): "
                                            f"{st.get('message', '')}")
        moves = [by_name[n].describe() for n in moved]
        step = {"job": name, "changes": [by_name[n].to_json() for n in moved], "outcome": outcome,
                "phase": st.get("phase"), "reason": st.get("reason")}
        runs.append(step)
        label = {cs.PASS: "Succeeded", cs.FAIL: "Failed", cs.UNRESOLVED: "cannot be built"}[outcome]
        step["text"] = (f"step {len(runs)}/{max_steps}: "
                        f"{', '.join(moves) if moves else 'the last success’s pins'} → {label} (job {name})")
        say(step["text"])
        if on_step is not None:
            on_step(dict(step))
        return outcome, name

    def report(result: str, code: int, found: list[cs.Change] | None, text: str) -> dict[str, Any]:
        return {"result": result, "exitCode": code, "failingJob": fname, "lastSuccess": sname,
                "culprits": None if found is None else [c.to_json() for c in found],
                "validations": len(runs), "maxSteps": max_steps, "steps": runs, "notes": notes,
                "changes": since, "message": text}

    t0 = time.monotonic()
    first, _ = validate([])
    if first == cs.FAIL:
        return report("notebook", EXIT_FAILED, None, "fails with the last success's environment too: the change is "
                                                     "in the notebook (" + _notebook_changes(since) + ")")
    if first == cs.UNRESOLVED:
        return report("old-environment-unbuildable", EXIT_INFRASTRUCTURE, None,
                      f"the last success's environment cannot be built any more (job {runs[-1]['job']}): "
                      "nothing to compare with")
    if not order:
        return report("not-found", EXIT_FAILED, None,
                      "no distribution changed, and the notebook succeeds with the last success's environment: "
                      "the failure does not follow a package change (flaky?)")
    outcome = cs.ddmin(order, validate, max_steps - 1, known={frozenset(): cs.PASS})
    took = f"{len(runs)} validation{'s' if len(runs) != 1 else ''}, {time.monotonic() - t0:.0f} s"
    if outcome.culprits and outcome.complete:
        found = [by_name[n] for n in outcome.culprits]
        return report("found", EXIT_OK, found, ", ".join(c.describe() for c in found)
                      + f" turn{'s' if len(found) == 1 else ''} it red ({took})")
    if outcome.culprits:
        found = [by_name[n] for n in outcome.culprits]
        return report("incomplete", EXIT_FAILED, found,
                      f"{outcome.reason}: narrowed to " + ", ".join(c.describe() for c in found)
                      + f", not yet to a minimal set ({took}; more --max-steps goes further)")
    return report("not-found", EXIT_FAILED, None,
                  f"no set of package changes found that turns it red: {outcome.reason} ({took})")


def _notebook_changes(since: dict[str, Any]) -> str:
    bits = []
    cells = since.get("cells")
    if cells and cells.get("changed"):
        for kind in ("edited", "added", "removed"):
            if cells.get(kind):
                bits.append(f"cells {kind} " + ", ".join(str(n) for n in cells[kind][:8]))
    elif cells is not None:
        bits.append("no cell changed")
    req = since.get("requirements") or {}
    if req.get("changed"):
        bits.append("requirements " + ", ".join(req.get("lines", [])[:4]))
    if since.get("golden"):
        bits.append("the golden notebook")
    if (since.get("inputFiles") or {}).get("changed"):
        bits.append("input files")
    if since.get("spec"):
        bits.append("options " + ", ".join(since["spec"]))
    return "; ".join(bits) or "nothing recorded changed: the notebook may be flaky"


def _interrupted(api: Remote | InProcess, name: str | None) -> int:
    if name is None:
        print("\ninterrupted", file=sys.stderr, flush=True)
        return 130
    said = "cancelled"
    try:
        job = api.cancel(name)
        if not is_terminal(_phase(job)):
            try:
                job = api.wait(name, lambda j: None, INTERRUPT_GRACE)
            except Exception:  # not ended within the grace: the engine goes on cancelling it
                pass
        st = job.get("status") or {}
        said = f"cancelled ({st.get('phase') or 'Pending'}" + (f", {st['reason']})" if st.get("reason") else ")")
    except ClientError as e:
        said = f"could not be cancelled: {e}"
    print(f"\ninterrupted: step job {name} {said}", file=sys.stderr, flush=True)
    return 130
