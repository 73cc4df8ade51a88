"""The ``job`` strategy: a batch/v1 Job running a kaniko-compatible executor.

The mechanics (build Job, builder pod, digest from the termination message)
live in :class:`..backend.KubernetesBackend` since the first release; this
wraps them behind the builder interface. The store's built-in Job and Pod
informers watch them.
"""

from __future__ import annotations

from ...backends.base import Observation
from . import Builder


class JobBuilder(Builder):
    strategy = "job"

    async def ensure(self, job: dict) -> Observation:
        return await self.backend._job_ensure_build(job)

    async def cancel(self, job: dict) -> None:
        await self.backend._job_cancel_build(job)

    async def log(self, job: dict) -> str | None:
        return await self.backend._job_build_log(job)
