"""A notebook's earlier jobs: the verdict cache (:meth:`HistoryRoom.unchanged`, an earlier
Succeeded job standing for the inputs as they are now) and what changed since its last
success (:meth:`HistoryRoom.since_last_success`). A probe job (a step of ``bisect``) never
stands for its notebook."""

from __future__ import annotations

import asyncio
import json
import posixpath
from typing import Any, Mapping, cast

import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.why_red.changes as changes
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import SOURCE_ANNOTATION, Phase
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.git_fetch import GitCache
from jupyter_nbvalidation.service.git_source import has_git
from jupyter_nbvalidation.service.state import ServiceState
from jupyter_nbvalidation.store.base import owner_of

PROBE_ANNOTATION = "nbvalidation.dev/probe-of"  # a bisect step: the failing job it probes for


def is_probe(job: Mapping[str, Any]) -> bool:
    return bool(((job.get("metadata") or {}).get("annotations") or {}).get(PROBE_ANNOTATION))


def source_of(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a notebook from git came from (``status.source``, else the annotation submit
    wrote it in): ``{url, ref, commit}``, or None for a notebook of the server's disk."""
    source = (job.get("status") or {}).get("source")
    if not source:
        text = ((job.get("metadata") or {}).get("annotations") or {}).get(SOURCE_ANNOTATION)
        try:
            source = json.loads(text) if text else None
        except ValueError:
            source = None
    return source if isinstance(source, dict) else None


class HistoryRoom(ServiceState):
    """Looking back through a notebook's jobs, newest first."""

    git: GitCache  # git_source.GitSourceRoom's

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
        commits = await self._commits_between(earlier, job)
        return await asyncio.to_thread(changes.summarize, before, after, commits)

    async def _commits_between(self, earlier: Job, job: Job) -> dict[str, Any] | None:
        """For a notebook from git: the commits from the last success's to the job's, with
        the files each changed under the notebook's folder (git_fetch.GitCache.log); None
        for a notebook of the server's disk, or when a commit is no longer in the cache."""
        old, new = source_of(earlier), source_of(job)
        if not old or not new or not old.get("commit") or not new.get("commit"):
            return None
        if old["commit"] == new["commit"]:
            return {"from": old["commit"], "to": new["commit"], "count": 0, "items": [], "files": [],
                    "ancestor": True}
        git = cast(Mapping[str, Any], (job.get("spec") or {}).get("notebook", {}).get("git") or {})
        folder = posixpath.dirname(job["spec"]["notebook"]["path"])
        return await self.git.log(new["url"], old["commit"], new["commit"], folder,
                                  cache=git.get("credentialsSecret") or "")

    def _series_of(self, job: Job) -> tuple[str, ...]:
        """What makes two jobs of one notebook path the same notebook: the root of the
        server's disk it was read from, or for a notebook from git the repository (each
        commit has a root of its own: the last success may be of an earlier commit)."""
        source = source_of(job)
        if source and source.get("url"):
            return ("git", str(source["url"]))
        return ("root", str(self._root_of(job)))

    async def _last_success_before(self, job: Job, max_pages: int) -> Job | None:
        series = self._series_of(job)
        token, listed = None, []
        for _ in range(max_pages):  # newest first: the first Succeeded one after the job itself
            items, token = await self.store.list_jobs(notebook=job["spec"]["notebook"]["path"], limit=100,
                                                      continue_token=token, owner=owner_of(job))
            listed += items
            found = changes.newest_in_phase(listed, Phase.SUCCEEDED, after=job["metadata"]["name"],
                                            keep=lambda other: self._series_of(other) == series and not is_probe(other))
            if found is not None or not token:
                return found
        return None
