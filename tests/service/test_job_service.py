"""JobService as its rooms make it up: what moved out of the REST handlers answers as
the handlers did, and the names other modules import from service.jobs are still there."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.jobs import JobService


def _service(phase: str) -> tuple[SimpleNamespace, list[str]]:
    deleted: list[str] = []
    job: dict[str, Any] = {"metadata": {"name": "j", "uid": "u-1"}, "status": {"phase": phase}}

    async def cancel(name: str) -> dict[str, Any]:
        return job

    async def delete_job(j: dict[str, Any]) -> None:
        deleted.append(j["metadata"]["name"])

    return SimpleNamespace(cancel=cancel, backend=SimpleNamespace(delete_job=delete_job)), deleted


@pytest.mark.parametrize(("phase", "code"), [(Phase.VALIDATION_RUNNING, 202), (Phase.SUCCEEDED, 200),
                                             (Phase.FAILED, 200)])
def test_cancel_only_never_removes_and_answers_202_while_the_job_runs(phase: str, code: int) -> None:
    """``DELETE /jobs/{name}?cancelOnly=true``: the job as the cancel left it, 202 while it runs,
    200 once it has ended; nothing is deleted either way."""
    service, deleted = _service(phase)
    got_code, answer = asyncio.run(JobService.delete(service, "j", cancel_only=True))  # type: ignore[arg-type]
    assert got_code == code
    assert answer["metadata"]["name"] == "j" and answer["status"]["phase"] == phase
    assert deleted == []


def test_api_error_is_importable_from_service_jobs_as_the_same_class() -> None:
    """service/bisections.py imports ApiError from service.jobs: the one class, not a copy."""
    import jupyter_nbvalidation.service.jobs as jobs

    assert jobs.ApiError is ApiError
