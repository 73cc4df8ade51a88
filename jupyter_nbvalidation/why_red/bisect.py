"""The search for the cause of a red (issue 22): which package changes since a notebook's
last success turned it red. ``jupyter nbvalidation bisect`` (cli/bisect.py) and the server's
**Find the cause** (service/bisections.py) run this one search, each over its own client.

Step 1 validates the notebook as it is now with the last success's exact pins: still red
means the change is in the notebook. Then cause_search.ddmin searches the changed
distributions, each step a real validation job submitted as a *probe* of the failing job
(annotation nbvalidation.dev/probe-of): the notebook's job list, verdict cache and last
success never show one. The result's ``exitCode`` (the command's exit status): 0 a culprit
set found, 1 none (or the notebook itself changed), 2 cannot bisect (no earlier success, no
environment records, Kubernetes), 3 the last success's environment cannot be built (or a
step ended by infrastructure), 130 a step cancelled.

What the search needs of a client it declares here (:class:`SearchClient`); it imports no
client, no CLI and no service.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any, Callable, Protocol

import jupyter_nbvalidation.why_red.cause_search as cs
from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.core.vocabulary import Reason
from jupyter_nbvalidation.why_red.changes import newest_in_phase

# the result's exitCode: the exit statuses of the CLI (cli/exits.py has the same numbers)
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INFRASTRUCTURE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


class SearchClient(Protocol):
    """What the search needs of a client: the CLI's (clients.base.Client: ``Remote``, a
    server's REST API, or ``InProcess``, this process's engine) or, in the server,
    service.bisections.ServiceCalls (the service itself). Every call blocks its caller. A
    refusal raises an exception whose ``status`` is the REST API's (404: not recorded here):
    the clients' ClientError, the service's ApiError."""

    def get(self, name: str) -> dict[str, Any]: ...

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]: ...

    def changes(self, name: str) -> dict[str, Any]: ...

    def environment(self, name: str) -> dict[str, Any]: ...

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]: ...

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]: ...

    def cancel(self, name: str) -> dict[str, Any]: ...


class JobLister(Protocol):
    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]: ...


def newest_job(api: JobLister, path: str, phase: str, limit: int = 500) -> dict[str, Any] | None:
    """The notebook's newest job (a summary) that ended in ``phase`` (probes are not listed), or None."""
    return newest_in_phase(api.list_jobs(path, limit), phase)


def _not_found(e: Exception) -> bool:
    """A refusal saying "not here" (404; see SearchClient)."""
    return getattr(e, "status", None) == 404


class Stop(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def _find_failing(api: SearchClient, path: str, name: str | None) -> dict[str, Any]:
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


def _record(api: SearchClient, name: str) -> dict[str, Any]:
    try:
        rec = api.environment(name)
    except Exception as e:
        if _not_found(e):
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
    commit = ((failing.get("status") or {}).get("source") or {}).get("commit")
    git = (spec.get("notebook") or {}).get("git")
    if commit and isinstance(git, dict):  # the failing job's commit, not where its branch is now
        git["ref"] = commit
    return spec


def search(api: SearchClient, path: str, job_name: str | None, max_steps: int, step_timeout: float | None,
           say: Callable[[str], None], current: list[str | None], stop: threading.Event | None = None,
           on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Which package changes since the last success turned ``path``'s failing job (its newest,
    or ``job_name``) red: the result document (``result``, ``exitCode``, ``culprits``, ``steps``,
    ``message`` …; what ``bisect -o json`` prints and ``GET /jobs/{name}/bisect`` serves).
    ``api``: the blocking job operations (:class:`SearchClient`), called from this thread. ``current[0]`` is the running step's
    job; ``stop``, once set, ends the wait for it (ClientError: the caller cancels it);
    ``on_step`` sees each step as it ends. Raises Stop when it cannot bisect."""
    failing = _find_failing(api, path, job_name)
    fname = failing["metadata"]["name"]
    try:
        since = api.changes(fname)
    except Exception as e:
        if _not_found(e):
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
            raise Stop(EXIT_INTERRUPTED, f"step job {name} was cancelled")
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
