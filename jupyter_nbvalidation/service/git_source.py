"""A submit whose notebook is in git (``spec.notebook.git``, ``spec.goldenNotebook.git``):
the spec checked first (a bad URL is a 400, nothing fetched, nothing created), then the
repository fetched at its ref (git_fetch.py) and the commit's tree made the root the
job's snapshot is taken from, as a folder of the server's would be (the environment is
found in it by the same rules, the verdict key is of its content). A fetch that fails is
still a job: it ends Failed with reason InfrastructureFailed naming the cause (the
engine, at Initializing), so a submit nobody waits for (a schedule) leaves a trace.
docs/watching.md."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import SOURCE_ANNOTATION, SOURCE_FAILURE_ANNOTATION, new_job
from jupyter_nbvalidation.secrets.registry import Caller, SecretNotAvailable
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.git_fetch import Credentials, Fetched, FetchFailed, GitCache
from jupyter_nbvalidation.service.state import ServiceState
from jupyter_nbvalidation.service.strict_json import find_bad_number
from jupyter_nbvalidation.store.base import OWNER_LABEL


def has_git(spec: Any) -> bool:
    return isinstance(spec, dict) and any(isinstance(spec.get(k), dict) and "git" in spec[k]
                                          for k in ("notebook", "goldenNotebook"))


class GitSourceRoom(ServiceState):
    """Fetching a job's notebook (and golden notebook) from git before its snapshot is taken."""

    git: GitCache
    past_the_service = False  # a view adopting a job made with kubectl (_adopt_git)

    async def _submit_git(self, spec: Any, probe_of: str | None, labels: dict[str, str]) -> Job:
        checked, creds = self._git_checked(spec)
        try:
            view, _ = await self._fetched_view(checked, creds)
        except FetchFailed as e:
            return await self._unfetched_job(checked, e, labels)
        return await view.submit(spec, probe_of, labels)

    async def _unchanged_git(self, spec: Any) -> Job | None:
        checked, creds = self._git_checked(spec)
        try:
            view, _ = await self._fetched_view(checked, creds)
        except FetchFailed:
            return None  # not known: it runs (and its job says why it cannot)
        return await view.unchanged(spec)

    async def _adopt_git(self, job: Job) -> None:
        """A job made past the service (``kubectl apply``) whose notebook is in git, for the engine
        that reconciles it: checked and fetched as a submit of its spec by its owner would be (its
        owner label; none: the server's own user), its snapshot stored and its source annotations
        written (the backend's ``adopt_snapshot``). A fetch that fails is recorded so the job ends
        InfrastructureFailed naming it; a spec or input a submit would refuse raises InputRejected
        naming the field (the job: InvalidInput). Nothing of a credential is written."""
        owner = (job["metadata"].get("labels") or {}).get(OWNER_LABEL)
        view = copy.copy(self)
        view.owner, view.caller = owner, (Caller(owner) if owner else Caller())
        view.past_the_service = True
        try:
            checked, creds = view._git_checked(job["spec"])
        except ApiError as e:
            raise InputRejected(e.message, e.field) from None
        try:
            fetched, _ = await view._fetched_view(checked, creds)
        except FetchFailed as e:
            source, message = _failure(checked, e)
            await self.backend.adopt_snapshot(job, None, {SOURCE_ANNOTATION: source,
                                                          SOURCE_FAILURE_ANNOTATION: message})
            return
        try:
            spec, files, nb_path, reqs, _env, _key = await fetched._prepare(job["spec"])
        except ApiError as e:
            raise InputRejected(e.message, e.field) from None
        if reqs.secrets:  # never on kubernetes (refused at _prepare); no job of this path holds them
            raise InputRejected("the requirements carry index credentials", "spec.podConfig.buildConfig")
        await self.backend.adopt_snapshot(job, files, fetched._submit_annotations(spec, nb_path, reqs))

    def _git_checked(self, spec: Any) -> tuple[dict[str, Any], dict[str, str]]:
        """The spec as submit checks it (400 naming the field), and the secret each source's
        ``credentialsSecret`` names: one the caller may use, else a 400 naming the field (the
        same answer for a name that does not exist and one they may not use)."""
        bad = find_bad_number(spec, "spec")
        if bad:
            raise ApiError(400, "InvalidSpec", f"{bad[0]}: {bad[1]}", bad[0])
        checked: dict[str, Any] = dict(self._validate(copy.deepcopy(spec)))
        names: dict[str, str] = {}
        for which in ("notebook", "goldenNotebook"):
            url = ((checked.get(which) or {}).get("git") or {}).get("url", "")
            if (self.owner is not None or self.past_the_service) and url.startswith("file:"):
                # a Hub user's, or a job made with kubectl: not the service's own files
                field = f"spec.{which}.git.url"
                who = "a job made past the service (kubectl)" if self.past_the_service else "a Hub user's job"
                raise ApiError(400, "InvalidSpec", f"{field}: a file:// URL names the service's own files, which "
                                                   f"{who} may not read; use https://, http:// or ssh://", field)
            name = ((checked.get(which) or {}).get("git") or {}).get("credentialsSecret")
            if name:
                field = f"spec.{which}.git.credentialsSecret"
                try:
                    self.secrets.check(name, self.caller)
                except SecretNotAvailable as e:
                    raise ApiError(400, "InvalidSpec", f"{field}: {e}", field) from None
                names[which] = name
        return checked, names

    async def _credentials(self, name: str | None) -> Credentials | None:
        """The secret's values as git credentials (read now, off the loop; never kept). One that
        cannot be read, or lacks the keys, fails the fetch (the job: InfrastructureFailed)."""
        if not name:
            return None
        try:
            values = await self.backend.secret_values(name)  # the kubernetes backend reads a fromSecret's
        except SecretNotAvailable as e:
            raise FetchFailed("the credentials cannot be read", f"secret {name!r}: {e.reason}") from None
        if values.get("ssh-privatekey"):
            return Credentials(ssh_key=values["ssh-privatekey"])
        password = values.get("password") or values.get("token")
        if values.get("username") and password:
            return Credentials(username=values["username"], password=password)
        raise FetchFailed("the credentials cannot be used", f"secret {name!r} has neither ssh-privatekey nor "
                                                            "username with password or token")

    async def _fetched_view(self, spec: dict[str, Any], names: dict[str, str]
                            ) -> tuple[ServiceState, dict[str, Any]]:
        """This service rooted at the notebook's commit (its golden notebook's, when it has its
        own source), and the source as the job's status records it."""
        nb_git = spec["notebook"].get("git")
        golden_git = (spec.get("goldenNotebook") or {}).get("git")
        view = copy.copy(self)
        view.at_commit = True
        source: dict[str, Any] = {}
        if nb_git:
            got = await self.git.fetch(nb_git["url"], nb_git["ref"], await self._credentials(names.get("notebook")),
                                       cache=names.get("notebook", ""))
            view.root_dir = view.real_root = os.path.realpath(got.tree)
            source = _source(got)
        if golden_git:
            got_golden: Fetched = await self.git.fetch(
                golden_git["url"], golden_git["ref"], await self._credentials(names.get("goldenNotebook")),
                cache=names.get("goldenNotebook", ""))
            view.golden_root = os.path.realpath(got_golden.tree)
            source["golden"] = _source(got_golden)
        view.extra_annotations = {SOURCE_ANNOTATION: json.dumps(source, sort_keys=True)}
        return view, source

    async def _unfetched_job(self, spec: dict[str, Any], failure: FetchFailed, labels: dict[str, str]) -> Job:
        """A job that ends InfrastructureFailed with ``failure`` (it has no snapshot)."""
        source, message = _failure(spec, failure)
        labels = {**labels, **self.extra_labels}
        if self.owner is not None:
            labels[OWNER_LABEL] = self.owner
        job = new_job(spec, labels=labels, annotations={  # type: ignore[arg-type]  # checked by _validate
            SOURCE_ANNOTATION: source, SOURCE_FAILURE_ANNOTATION: message})
        try:
            job = await self.backend.submit(job, {})
        except InputRejected as e:
            raise ApiError(e.status, e.code, e.message, e.field) from None
        self.engine.enqueue(job["metadata"]["name"])
        return job


def _failure(spec: dict[str, Any], failure: FetchFailed) -> tuple[str, str]:
    """A failed fetch's source annotation (JSON {url, ref}) and message."""
    which = "goldenNotebook" if not spec["notebook"].get("git") else "notebook"
    git = spec[which]["git"]
    message = (f"Fetching spec.{which}.git failed: {failure} ({git['url']} at {git['ref']}); "
               "the notebook was not run")
    return json.dumps({"url": git["url"], "ref": git["ref"]}, sort_keys=True), message


def _source(got: Fetched) -> dict[str, Any]:
    return {"url": got.url, "ref": got.ref, "commit": got.commit}
