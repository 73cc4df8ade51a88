"""Jobs of many users in one service (a JupyterHub service): whose a job is, and the fair
quotas per user. A view of the service for one user (``JobService.as_user``) sees and touches
only that user's jobs (its ``get`` answers another's job as 404, its list filters on the owner
in the store); every job it submits carries the owner's label (``store.base.OWNER_LABEL``),
and a submit past the user's quota is a 429 naming the numbers, with Retry-After."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from jupyter_nbvalidation.core.model import Phase, is_terminal
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.store.base import JobStore, owner_of

#: the phases in which a job holds a slot (a build or a validation); the other non-terminal
#: phases wait for one
RUNNING_PHASES = frozenset({Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING})
#: a user's name as a label value (Kubernetes: 63 characters of [A-Za-z0-9_.-]); a Hub user's
#: name may hold others (an e-mail address), so the label is the name with them escaped
_LABEL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def owner_label(user: str) -> str:
    """The owner label's value for Hub user ``user``: the name itself when it is a valid label
    value, else a readable escape with a hash suffix (never two users on one value)."""
    if 0 < len(user) <= 63 and set(user) <= _LABEL_SAFE and user[0].isalnum() and user[-1].isalnum():
        return user
    import hashlib  # deferred: only for names that are no label value

    digest = hashlib.sha256(user.encode()).hexdigest()[:10]
    kept = "".join(c if c in _LABEL_SAFE else "_" for c in user)[:40].strip("_.-") or "u"
    return f"{kept}-{digest}"


@dataclass(frozen=True)
class Quotas:
    """Per user: at most ``max_active`` jobs in flight (not ended) and ``max_queued`` of them
    waiting for a slot; None is no limit. ``retry_after``: the seconds a refused submit is told
    to wait."""

    max_active: int | None = None
    max_queued: int | None = None
    retry_after: int = 10


async def owner_counts(store: JobStore, owner: str) -> tuple[int, int]:
    """(jobs in flight, of them waiting for a slot) of ``owner``."""
    active = [j for j in await store.list_active() if owner_of(j) == owner
              and not is_terminal((j.get("status") or {}).get("phase"))]
    queued = [j for j in active if (j.get("status") or {}).get("phase", "") not in RUNNING_PHASES]
    return len(active), len(queued)


def check_quotas(quotas: Quotas, user: str, active: int, queued: int) -> None:
    """A 429 when one more job of ``user`` would pass a quota, with the numbers."""
    details: dict[str, Any] = {"user": user, "active": active, "queued": queued,
                               "maxActivePerUser": quotas.max_active, "maxQueuedPerUser": quotas.max_queued}
    if quotas.max_active is not None and active >= quotas.max_active:
        raise ApiError(429, "QuotaExceeded", f"{user} has {active} validations in flight; the limit is "
                       f"{quotas.max_active} per user (max_active_per_user): retry when one has finished",
                       retry_after=quotas.retry_after, details=details)
    if quotas.max_queued is not None and queued >= quotas.max_queued:
        raise ApiError(429, "QuotaExceeded", f"{user} has {queued} validations waiting for a slot; the limit is "
                       f"{quotas.max_queued} per user (max_queued_per_user): retry when one has started",
                       retry_after=quotas.retry_after, details=details)


class QuotaLocks:
    """One lock per user: a user's count and create are one step, so two submits at once cannot
    both pass the last free place."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def of(self, user: str) -> asyncio.Lock:
        return self._locks.setdefault(user, asyncio.Lock())
