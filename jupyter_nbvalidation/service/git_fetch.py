"""Notebooks from git: a repository fetched at a ref into a per-URL cache, and the commit's
tree exported as a folder that a job's snapshot is taken from (docs/watching.md).

Everything here runs ``git`` as an asyncio subprocess (never on the loop's thread, never
in a kernel), bounded in time, apart from the server user's own git and ssh settings (no
global or system config, no credential helper, no agent, no key of the user's), with
prompts off. A URL is only ever given on the command line: the cache's ``config`` never
holds one, nor a credential. Credentials reach git through an askpass script reading its
environment, or an ssh key in a 0600 file in a 0700 folder removed after the fetch; every
message quoted from git is masked first (core/redaction.py).

The cache (``<git_dir>/repos/<hash of the URL>.git``, bare) keeps every object fetched, so
a rerun of the same commit needs no network when the ref is a SHA, and only new objects
when it is a branch or a tag. A commit's tree is exported once, to
``<git_dir>/trees/<commit>`` (no ``.git`` in it), which becomes the job's root.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import signal
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.tasks import wait_within

LAST_USE = "nbv-last-use"  # in a repository of the cache: touched by every fetch (collect)
_SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
_ASKPASS = """#!/bin/sh
case "$1" in
  [Uu]sername*) printf '%s\\n' "$NBV_GIT_USERNAME" ;;
  *) printf '%s\\n' "$NBV_GIT_PASSWORD" ;;
esac
"""
# what of the server's environment a fetch keeps (proxies, locale for nothing else: LC_ALL=C below)
_KEPT_ENV = ("PATH", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "TMPDIR")
# the protocols a URL may use (spec/checks.py refuses any other before this runs)
_CONFIG = ("credential.helper=", "protocol.allow=never", "protocol.https.allow=always", "protocol.http.allow=always",
           "protocol.ssh.allow=always", "protocol.file.allow=always", "core.hooksPath=/dev/null",
           "core.fsmonitor=false", "gc.auto=0")


@dataclass(frozen=True)
class Credentials:
    """What a secret gives a fetch: ``username`` with ``password`` (a password or a token),
    or ``ssh_key`` (a private key's text)."""

    username: str | None = None
    password: str | None = None
    ssh_key: str | None = None

    def values(self) -> list[str]:
        """The values to mask in anything quoted (the user name too: it may be a token)."""
        return [v for v in (self.password, self.ssh_key, self.username) if v]


@dataclass(frozen=True)
class Fetched:
    url: str
    ref: str
    commit: str
    tree: str  # the exported folder: the job's root


class FetchFailed(Exception):
    """A repository that cannot be had: ``cause`` says which (no such host, no such ref,
    wrong or missing credentials, timed out, ...); the message is free of credentials."""

    def __init__(self, cause: str, detail: str = ""):
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause


# git's messages (LC_ALL=C) and what each says of a failed fetch, first match wins
_CAUSES = (
    (re.compile(r"could not resolve host|could not resolve hostname|name or service not known|"
                r"temporary failure in name resolution|no address associated", re.I), "no such host"),
    (re.compile(r"couldn't find remote ref|not our ref|unadvertised object|no such remote ref|"
                r"remote ref .* not found|invalid refspec|is not a valid|bad object", re.I), "no such ref"),
    (re.compile(r"authentication failed|could not read username|could not read password|"
                r"terminal prompts disabled|permission denied \(publickey|permission denied, please try again|"
                r"\b401\b|\b403\b|invalid username or password|access denied", re.I),
     "wrong or missing credentials"),
    (re.compile(r"connection refused|couldn.t connect|failed to connect|connection timed out|timed out|network is unreachable|no route to host|"
                r"connection reset", re.I), "cannot connect"),
    (re.compile(r"does not appear to be a git repository|repository .* not found|not found|\b404\b|"
                r"no such file or directory", re.I), "no such repository"),
)


def classify(stderr: str) -> str:
    for pattern, cause in _CAUSES:
        if pattern.search(stderr):
            return cause
    return "git fetch failed"


def _last_lines(text: str, secrets: Iterable[str], n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("hint:")]
    return scrub(" / ".join(lines[-n:]), secrets)[:600]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class GitCache:
    """Fetches into ``root`` (a folder of the server's data dir), each fetch within
    ``timeout`` seconds, one fetch per repository at a time in this process."""

    def __init__(self, root: str, timeout: float = 120.0, connect_timeout: int = 10):
        self.root = root
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._locks: dict[str, asyncio.Lock] = {}

    def repo_dir(self, url: str, cache: str = "") -> str:
        """The cache of ``url`` as fetched with the secret named ``cache`` ("" without one): a
        commit had with a secret is never answered from the cache to a fetch without it."""
        return os.path.join(self.root, "repos", _key(f"{url}\0{cache}") + ".git")

    def tree_dir(self, commit: str) -> str:
        return os.path.join(self.root, "trees", commit)

    async def fetch(self, url: str, ref: str, credentials: Credentials | None = None, cache: str = "") -> Fetched:
        """The commit ``ref`` names in ``url``, with its tree exported; FetchFailed naming
        why not. A full SHA already in the cache (``cache``: the secret's name) needs no network."""
        creds = credentials or Credentials()
        deadline = time.monotonic() + self.timeout
        repo = self.repo_dir(url, cache)
        lock = self._locks.setdefault(repo, asyncio.Lock())
        async with lock:
            await asyncio.to_thread(os.makedirs, os.path.dirname(repo), 0o700, True)
            if not await asyncio.to_thread(os.path.isdir, os.path.join(repo, "objects")):
                await self._git(["init", "--bare", "-q", repo], deadline, creds, cwd=None)
            commit = await self._resolve(repo, url, ref, creds, deadline)
            tree = self.tree_dir(commit)
            if not await asyncio.to_thread(os.path.isdir, tree):
                await self._export(repo, commit, tree, creds, deadline)
            # used now: a collection leaves both alone for a while (collect)
            await asyncio.to_thread(_touch, tree, os.path.join(repo, LAST_USE))
        return Fetched(url=url, ref=ref, commit=commit, tree=tree)

    async def collect(self, keep_trees: set[str], repo_ttl: float, tree_min_age: float = 3600.0) -> dict[str, object]:
        """Remove the commits' trees no job roots in (``keep_trees``: real paths) that no
        fetch used for ``tree_min_age`` seconds (a submit fetches before its job exists), and
        the repositories no fetch used for ``repo_ttl`` seconds (0: kept). A removed
        repository costs only a fetch again (and the commits of a "since the last success"
        that reaches back to it)."""
        removed_trees: list[str] = []
        removed_repos: list[str] = []
        now = time.time()
        trees = os.path.join(self.root, "trees")
        for name in await asyncio.to_thread(_listdir, trees):
            path = os.path.join(trees, name)
            if name.startswith(".") or not _SHA.match(name) or await asyncio.to_thread(os.path.realpath, path) in keep_trees:
                continue
            if now - await asyncio.to_thread(_mtime, path) > tree_min_age:
                await asyncio.to_thread(_remove, path)
                removed_trees.append(name)
        repos = os.path.join(self.root, "repos")
        if repo_ttl > 0:
            for name in await asyncio.to_thread(_listdir, repos):
                path = os.path.join(repos, name)
                if not name.endswith(".git"):
                    continue
                async with self._locks.setdefault(path, asyncio.Lock()):  # never under a fetch of this process
                    used = await asyncio.to_thread(_mtime, os.path.join(path, LAST_USE))
                    if now - (used or await asyncio.to_thread(_mtime, path)) > repo_ttl:
                        await asyncio.to_thread(_remove, path)
                        removed_repos.append(name)
        return {"gitTrees": removed_trees, "gitRepos": removed_repos}

    async def log(self, url: str, old: str, new: str, folder: str, cache: str = "",
                  limit: int = 50) -> dict[str, object] | None:
        """The commits from ``old`` (excluded) to ``new`` in the cache of ``url``, newest first,
        each with the files it changed under ``folder`` (the notebook's, relative to the
        repository's root; "" for all): ``{"from", "to", "count", "items": [{"commit",
        "subject", "author", "date", "files"}], "files": [every file changed under folder],
        "ancestor": whether old is an ancestor of new}``. None when either commit is not in
        the cache (it was never fetched here). No network: both were fetched for their jobs."""
        repo = self.repo_dir(url, cache)
        deadline = time.monotonic() + self.timeout
        none = Credentials()
        if not (_SHA.match(old) and _SHA.match(new)):
            return None
        if not (await asyncio.to_thread(os.path.isdir, repo) and await self._has_commit(repo, old, deadline)
                and await self._has_commit(repo, new, deadline)):
            return None
        code, _ = await self._git(["--git-dir", repo, "merge-base", "--is-ancestor", old, new], deadline, none,
                                  check=False)
        _, counted = await self._git(["--git-dir", repo, "rev-list", "--count", f"{old}..{new}"], deadline, none,
                                     stdout=True)
        _, out = await self._git(["--git-dir", repo, "log", f"--max-count={limit}", "--no-color", "--no-renames",
                                  "--format=%x1e%H%x1f%s%x1f%an%x1f%aI", "--name-only", f"{old}..{new}"],
                                 deadline, none, stdout=True)
        prefix = folder.strip("/") + "/" if folder.strip("/") else ""
        items: list[dict[str, object]] = []
        every: list[str] = []
        for record in out.split("\x1e")[1:]:
            head, _, names = record.partition("\n")
            sha, subject, author, date = (head.split("\x1f") + ["", "", ""])[:4]
            files = [n for n in names.splitlines() if n and n.startswith(prefix)]
            items.append({"commit": sha, "subject": subject, "author": author, "date": date, "files": files[:50]})
            every += [f for f in files if f not in every]
        return {"from": old, "to": new, "count": int(counted.strip() or 0), "items": items,
                "files": every[:50], "ancestor": code == 0}

    async def _resolve(self, repo: str, url: str, ref: str, creds: Credentials, deadline: float) -> str:
        keep = f"refs/nbv/{_key(ref)}"  # keeps what was fetched reachable (one ref per asked ref)
        if _SHA.match(ref.lower()):
            sha = ref.lower()
            if await self._has_commit(repo, sha, deadline):
                return sha
            code, err = await self._git(["--git-dir", repo, "fetch", "-q", "--no-tags", "--no-write-fetch-head",
                                         "--", url, f"+{sha}:{keep}"], deadline, creds, check=False)
            if code != 0 and classify(err) in ("no such ref", "git fetch failed"):
                # the server does not serve a SHA directly: every branch and tag, then look
                code, err = await self._git(["--git-dir", repo, "fetch", "-q", "--no-write-fetch-head", "--", url,
                                             "+refs/heads/*:refs/nbv-all/heads/*", "+refs/tags/*:refs/nbv-all/tags/*"],
                                            deadline, creds, check=False)
            if code != 0:
                raise FetchFailed(classify(err), _last_lines(err, creds.values()))
            if not await self._has_commit(repo, sha, deadline):
                raise FetchFailed("no such ref", f"no commit {sha} in {scrub(url)}")
            return sha
        code, err = await self._git(["--git-dir", repo, "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--",
                                     url, f"+{ref}:{keep}"], deadline, creds, check=False)
        if code != 0:
            raise FetchFailed(classify(err), _last_lines(err, creds.values()))
        _, out = await self._git(["--git-dir", repo, "rev-parse", "--verify", "-q", f"{keep}^{{commit}}"],
                                 deadline, creds, stdout=True)
        commit = out.strip()
        if not _SHA.match(commit):
            raise FetchFailed("no such ref", f"{ref} does not name a commit")
        return commit

    async def _has_commit(self, repo: str, sha: str, deadline: float) -> bool:
        code, _ = await self._git(["--git-dir", repo, "cat-file", "-e", f"{sha}^{{commit}}"], deadline,
                                  Credentials(), check=False)
        return code == 0

    async def _export(self, repo: str, commit: str, tree: str, creds: Credentials, deadline: float) -> None:
        """The commit's files (no .git), written beside and moved into place at once."""
        trees = os.path.dirname(tree)
        await asyncio.to_thread(os.makedirs, trees, 0o755, True)
        work = os.path.join(trees, f".{commit}.{uuid.uuid4().hex}")
        archive = work + ".tar"
        try:
            await self._git(["--git-dir", repo, "archive", "--format=tar", "-o", archive, commit], deadline, creds)
            await asyncio.to_thread(_extract, archive, work)
            try:
                await asyncio.to_thread(os.rename, work, tree)
            except OSError:
                if not await asyncio.to_thread(os.path.isdir, tree):  # not another fetch's export: a real error
                    raise
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
            await asyncio.to_thread(_unlink, archive)

    async def _git(self, args: list[str], deadline: float, creds: Credentials, *, cwd: str | None = None,
                   check: bool = True, stdout: bool = False) -> tuple[int, str]:
        """Run git; (exit code, stderr — or stdout when ``stdout``). Over the deadline: the
        process group is killed and FetchFailed("timed out") raised."""
        secret_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="nbv-git-")  # 0700
        try:
            env = await asyncio.to_thread(self._env, secret_dir, creds)
            cmd = ["git"]
            for item in _CONFIG:
                cmd += ["-c", item]
            proc = await asyncio.create_subprocess_exec(
                *cmd, *args, cwd=cwd or secret_dir, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
            try:
                out, err = await wait_within(proc.communicate(), max(0.1, deadline - time.monotonic()))
            except (asyncio.TimeoutError, asyncio.CancelledError) as e:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()
                if isinstance(e, asyncio.CancelledError):
                    raise
                raise FetchFailed("timed out", f"no answer within {self.timeout:g} s") from None
        finally:
            await asyncio.to_thread(shutil.rmtree, secret_dir, True)
        text_err = err.decode("utf-8", "replace")
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise FetchFailed(classify(text_err), _last_lines(text_err, creds.values()))
        return code, (out.decode("utf-8", "replace") if stdout else text_err)

    def _env(self, secret_dir: str, creds: Credentials) -> dict[str, str]:
        """git's environment: nothing of the server user's git or ssh settings; prompts off;
        the credentials, when given, through files only this user can read (in ``secret_dir``)."""
        env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
        home = os.path.join(secret_dir, "home")
        os.mkdir(home, 0o700)
        env.update({"HOME": home, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_PROTOCOL_FROM_USER": "0",
                    "GIT_HTTP_LOW_SPEED_LIMIT": "1", "GIT_HTTP_LOW_SPEED_TIME": str(max(5, int(self.timeout))),
                    "SSH_ASKPASS_REQUIRE": "never"})
        askpass = os.path.join(secret_dir, "askpass")
        with open(os.open(askpass, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "w") as f:
            f.write(_ASKPASS)
        env["GIT_ASKPASS"] = askpass
        env["NBV_GIT_USERNAME"] = creds.username or ""
        env["NBV_GIT_PASSWORD"] = creds.password or ""
        ssh = ["ssh", "-F", os.devnull, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
               "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "StrictHostKeyChecking=accept-new",
               "-o", f"UserKnownHostsFile={os.path.join(self.root, 'known_hosts')}"]
        if creds.ssh_key:
            key = os.path.join(secret_dir, "key")
            with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(creds.ssh_key if creds.ssh_key.endswith("\n") else creds.ssh_key + "\n")
            ssh += ["-i", key]
        env["GIT_SSH_COMMAND"] = " ".join(_quote(a) for a in ssh)
        return env


def _touch(*paths: str) -> None:
    for path in paths:
        try:
            os.utime(path)
        except FileNotFoundError:
            with open(path, "a"):
                pass


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _remove(path: str) -> None:
    """Out of sight first (one rename: nothing half-removed is ever used), then removed."""
    gone = os.path.join(os.path.dirname(path), f".gone-{os.path.basename(path)}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, gone)
    except OSError:
        return
    shutil.rmtree(gone, ignore_errors=True)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _extract(archive: str, dest: str) -> None:
    """A commit's tar into ``dest``: a member the data filter refuses (a link out of the
    tree, an absolute path) is left out."""
    os.makedirs(dest, 0o755)

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError:
            return None

    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter=keep)
    Path(dest).chmod(0o755)
