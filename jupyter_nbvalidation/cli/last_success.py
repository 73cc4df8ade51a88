"""A notebook's last success as the CLI finds it: ``lock`` pins its environment, and
``--constraints-from-last-success`` (``submit``, ``run``) keeps its versions.

The finder is the one the service uses for "since the last success" (``GET
/jobs/{name}/changes``): ``why_red.changes.newest_in_phase``, here over the client's job
list (newest first; probes and other roots' jobs left out by the service), there over the
store's pages after a given job. These callers have no job to start from (``lock`` without
``--job``, the constraints before anything is submitted), so they read the list.
"""

from __future__ import annotations

from typing import Any

import jupyter_nbvalidation.why_red.lock as environment_lock
from jupyter_nbvalidation.clients.base import Client, ClientError
from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.why_red.bisect import newest_job


def last_success(api: Client, path: str) -> dict[str, Any] | None:
    """The notebook's newest Succeeded job, or None."""
    return newest_job(api, path, Phase.SUCCEEDED)


def last_success_constraints(api: Client, path: str) -> tuple[list[str], str]:
    """``--constraints-from-last-success``: (the ``name==version`` pins of the environment
    of the notebook's last success, a sentence saying what they are). No earlier success:
    no pins, and the sentence says so (the notebook is validated as declared). A last
    success whose environment has no lock is an error (ClientError): asked to keep its
    versions, validating without them would not be what was asked."""
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


def add_constraints(spec: dict[str, Any], pins: list[str]) -> None:
    """``pins`` after the spec's own ``buildConfig.constraints``."""
    if not pins:
        return
    bc = spec.setdefault("podConfig", {}).setdefault("buildConfig", {})
    given = list(bc.get("constraints") or [])
    bc["constraints"] = given + pins  # the user's own --constraint first: an equal name conflicts loudly
