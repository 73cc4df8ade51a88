"""An informer: LIST one kind in one namespace, then WATCH it, into a cache.

The loop is client-go's reflector, in asyncio:

- LIST (paginated) gives the objects and a resourceVersion; WATCH continues
  from it with ``allowWatchBookmarks=true``; each event updates the cache and
  calls ``on_change(obj, deleted)``;
- a watch that ends or breaks is resumed from the last resourceVersion seen
  (bookmarks included); ``410 Gone`` (an HTTP 410 or an ERROR event with code
  410) means that version was compacted away: LIST again;
- API errors back off exponentially (with jitter, capped); nothing raises out
  of :meth:`Informer.run` except cancellation.

Writes made by this process are put into the cache at once (:meth:`put`),
"read your writes": an object only replaces a cached one when its
resourceVersion is not older. resourceVersions are opaque by contract; every
etcd-backed API server makes them increasing integers, which is what the
comparison relies on (as client-go's mutation cache does). When one is not
an integer, the newest arrival wins.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Callable

from jupyter_nbvalidation.backends.kubernetes.client import WATCH_OPEN, Kube, KubeApiError

OnChange = Callable[[dict[str, Any], bool], None]  # (object, deleted)


def rv_int(obj: dict[str, Any] | None) -> int | None:
    try:
        rv: Any = ((obj or {}).get("metadata") or {}).get("resourceVersion")  # a str, or None: TypeError below
        return int(rv)
    except (TypeError, ValueError):
        return None


def not_older(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    a, b = rv_int(new), rv_int(old)
    return old is None or a is None or b is None or a >= b


class _Gone(Exception):
    pass


class Informer:
    def __init__(self, kube: Kube, path: str, *, on_change: OnChange, log: Any, label_selector: str | None = None,
                 api_version: str | None = None, kind: str | None = None, watch_timeout: int = 290,
                 page_size: int = 500, max_backoff: float = 30.0, name: str = "informer",
                 on_recovered: Callable[[float], None] | None = None):
        self.kube = kube
        self.path = path
        self.on_change = on_change
        self.log = log
        self.label_selector = label_selector
        self.api_version = api_version
        self.kind = kind
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.max_backoff = max_backoff
        self.name = name
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()  # the first LIST is in
        self.healthy = False  # the watch is connected (not in a back-off)
        self.resource_version: str | None = None
        self.lists = 0
        self.watches = 0
        self.errors = 0
        self.last_error: str | None = None
        self.unhealthy_since: float | None = None  # wall-clock time the watch broke (None: healthy)
        self.on_recovered = on_recovered
        self._unreachable = 0  # consecutive failed attempts to reach the API server

    def _up(self) -> None:
        self.healthy = True
        self._unreachable = 0
        if self.unhealthy_since is not None:
            since, self.unhealthy_since = self.unhealthy_since, None
            self.last_error = None
            if self.on_recovered is not None:
                try:
                    self.on_recovered(since)
                except Exception:
                    self.log.exception("nbvalidation: %s recovery handler failed", self.name)

    @property
    def usable(self) -> bool:
        """The cache can answer reads: synced and not known to be cut off."""
        return self.synced.is_set() and self.healthy

    # -- the cache -----------------------------------------------------------
    def _norm(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.api_version:
            obj.setdefault("apiVersion", self.api_version)
        if self.kind:
            obj.setdefault("kind", self.kind)
        return obj

    def get(self, name: str) -> dict[str, Any] | None:
        return self.cache.get(name)

    def put(self, obj: dict[str, Any]) -> bool:
        """Store an object this process read or wrote, unless the cache
        already holds a newer version. Returns whether it was stored."""
        name = obj["metadata"]["name"]
        if not_older(obj, self.cache.get(name)):
            self.cache[name] = self._norm(obj)
            return True
        return False

    def forget(self, name: str) -> None:
        self.cache.pop(name, None)

    def _changed(self, obj: dict[str, Any], deleted: bool = False) -> None:
        try:
            self.on_change(obj, deleted)
        except Exception:  # a subscriber must never break the informer
            self.log.exception("nbvalidation: %s change handler failed", self.name)

    # -- list + watch --------------------------------------------------------
    async def _list(self) -> str | None:
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = await self.kube.request("GET", self.path, query={
                "labelSelector": self.label_selector, "limit": self.page_size, "continue": cont})
            items += page.get("items") or []
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or None
            if not cont:
                break
        self.lists += 1
        list_rv = meta.get("resourceVersion")
        seen = set()
        for obj in items:
            name = obj["metadata"]["name"]
            seen.add(name)
            if self.put(obj):
                self._changed(self.cache[name])
        floor = rv_int({"metadata": {"resourceVersion": list_rv}})
        for name in [n for n in self.cache if n not in seen]:
            cached_rv = rv_int(self.cache[name])
            if floor is None or cached_rv is None or cached_rv <= floor:  # gone (not a newer write of ours)
                self._changed(self.cache.pop(name), deleted=True)
        return list_rv

    async def _watch(self, rv: str | None) -> None:
        """Watch from ``rv``; ``self.resource_version`` follows every event
        (bookmarks too), so a broken watch resumes where it stopped."""
        self.resource_version = rv
        query = {"resourceVersion": rv, "allowWatchBookmarks": "true", "labelSelector": self.label_selector}
        timeout = int(self.watch_timeout * (0.9 + 0.2 * random.random()))
        self.watches += 1
        try:
            async for ev in self.kube.watch(self.path, query, timeout):
                etype = ev.get("type")
                if etype == WATCH_OPEN:
                    self._up()
                    continue
                obj = ev.get("object") or {}
                if etype == "ERROR":
                    code = obj.get("code") or 0
                    if code == 410:
                        raise _Gone()
                    raise KubeApiError(code, obj.get("reason") or "Error",
                                       obj.get("message") or "the watch reported an error")
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    self.resource_version = new_rv or self.resource_version
                    continue
                name = (obj.get("metadata") or {}).get("name")
                if not name:
                    continue
                if etype in ("ADDED", "MODIFIED"):
                    if self.put(obj):
                        self._changed(self.cache[name])
                elif etype == "DELETED":
                    self.cache.pop(name, None)
                    self._changed(self._norm(obj), deleted=True)
                self.resource_version = new_rv or self.resource_version
        except KubeApiError as e:
            if e.status == 410:
                raise _Gone() from None
            raise

    async def run(self) -> None:
        backoff = min(0.2, self.max_backoff)
        self.resource_version = None
        while True:
            try:
                if self.resource_version is None:
                    self.resource_version = await self._list()
                    self._up()
                    self.synced.set()
                await self._watch(self.resource_version)
                backoff = min(0.2, self.max_backoff)
            except asyncio.CancelledError:
                self.healthy = False
                raise
            except _Gone:
                self.log.info("nbvalidation: %s: resourceVersion %s expired; listing again",
                              self.name, self.resource_version)
                self.resource_version = None
            except Exception as e:
                self.healthy = False
                if self.unhealthy_since is None:
                    self.unhealthy_since = time.time()
                if isinstance(e, KubeApiError) and e.status == 0:
                    # one broken stream resumes from the last resourceVersion; a
                    # reconnect that fails too is an outage: LIST again when the
                    # API server answers (nothing seen before it is trusted)
                    self._unreachable += 1
                    if self._unreachable >= 2:
                        self.resource_version = None
                self.errors += 1
                self.last_error = str(e)
                self.log.warning("nbvalidation: %s: %s; retrying in %.1fs", self.name, e, backoff)
                await asyncio.sleep(backoff * (0.8 + 0.4 * random.random()))
                backoff = min(self.max_backoff, backoff * 2)
