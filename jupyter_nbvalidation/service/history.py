"""A notebook's earlier jobs: the verdict cache (:meth:`HistoryRoom.unchanged`, an earlier
Succeeded job standing for the inputs as they are now) and what changed since its last
success (:meth:`HistoryRoom.since_last_success`). A probe job (a step of ``bisect``) never
stands for its notebook."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping

import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.why_red.changes as changes
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION, SOURCE_ANNOTATION, Phase
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.git_source import has_git
from jupyter_nbvalidation.service.state import ServiceState
from jupyter_nbvalidation.store.base import owner_of

PROBE_ANNOTATION = "nbvalidation.dev/probe-of"  # a bisect step: the failing job it probes for


def is_probe(job: Mapping[str, Any]) -> bool:
    return bool(((job.get("metadata") or {}).get("annotations") or {}).get(PROBE_ANNOTATION))


class HistoryRoom(ServiceState):
    """Looking back through a notebook's jobs, newest first."""

    async def unchanged(self, spec: Any, max_pages: int = 20) -> Job | None:
        """The verdict cache: an earlier Succeeded job whose verdict key equals the key
        ``spec``'s inputs have now (see verdict_cache), or None. Checks the spec and reads
        the inputs as submit does (bad input raises as there); creates nothing."""
        if not self.at_commit and has_git(spec):  # fetched first (git_source.py)
            return await self._unchanged_git(spec)
        spec, _files, _nb_path, _reqs, env, key = await self._prepare(spec)
        if not key or env is None:
            return None
        token = None
        for _ in range(max_pages):  # newest first: the newest job with the key decides
            items, token = await self.store.list_jobs(notebook=spec["notebook"]["path"], limit=100, continue_token=token,
                                                      owner=self.owner)
            for job in items:
                if is_probe(job):
                    continue
                # only jobs of this root, and known to be: a job without its root never stands in
                if self._root_of(job) == self.real_root and verdict_cache.has_key(job, key):
                    # the newest with the key decides: a Failed, Cancelled or unfinished one means it runs
                    if verdict_cache.matches(job, key) and await self.backend.same_verdict_environment(job, env) \
                            and await asyncio.to_thread(verdict_cache.reads_hold, job, self.real_root):
                        return job
                    return None
            if not token:
                break
        return None

    async def since_last_success(self, name: str, max_pages: int = 20) -> dict[str, Any]:
        """What changed between the job and the newest earlier Succeeded job of the same
        notebook (this root's): changes.summarize; ``{"since": null}`` when there is none."""
        job = await self.get(name)
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet, "
                                            "so it cannot say what changed")
        earlier = await self._last_success_before(job, max_pages)
        if earlier is None:
            return {"since": None, "sentence": "no earlier success of this notebook"}
        before, after = [changes.Side(j, await self.backend.snapshot_files(j), await self.backend.environment_record(j))
                         for j in (earlier, job)]
        return await asyncio.to_thread(changes.summarize, before, after)

    async def _last_success_before(self, job: Job, max_pages: int) -> Job | None:
        place = _place(job)
        token, listed = None, []
        for _ in range(max_pages):  # newest first: the first Succeeded one after the job itself
            items, token = await self.store.list_jobs(notebook=job["spec"]["notebook"]["path"], limit=100,
                                                      continue_token=token, owner=owner_of(job))
            listed += items
            found = changes.newest_in_phase(listed, Phase.SUCCEEDED, after=job["metadata"]["name"],
                                            keep=lambda other: _place(other) == place and not is_probe(other))
            if found is not None or not token:
                return found
        return None


def _place(job: Job) -> Any:
    """Where a job's notebook is, as its history compares it: a notebook from git by its
    repository's URL (each commit has a root of its own: the commits between two runs are
    what changed), any other by its root."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    source = annotations.get(SOURCE_ANNOTATION)
    if source:
        try:
            url = json.loads(source).get("url")
        except (ValueError, AttributeError):
            url = None
        if url:
            return ("git", url)
    return annotations.get(ROOT_ANNOTATION)
