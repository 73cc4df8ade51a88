"""The service's one error: :class:`ApiError`, a client mistake or a known refusal, as HTTP
(its status, a stable code, a message and the field it is about); and what a store's own
errors are as one (:func:`store_api_error`). Every entry point (REST, CLI, magic) catches it."""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.store.base import NotFound, StoreBroken, StoreError


class ApiError(Exception):
    """A client mistake (4xx) or a known server-side refusal."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, *,
                 retry_after: int | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after  # seconds, sent as Retry-After (a quota's 429)
        self.details = details  # the numbers behind a refusal (a quota's), in the body's error.details

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


def store_api_error(e: BaseException) -> "ApiError | None":
    """What a store raised past the service's own checks, as HTTP: NotFound is the service's 404; any
    other store error means it is not reachable (yet: a Kubernetes store before its caches synced),
    a 503 worth retrying. None: not a store error."""
    if isinstance(e, StoreBroken):  # waiting does not help: the message says what is wrong
        return ApiError(503, "StoreUnavailable", f"The job store is not available: {e}.")
    if isinstance(e, StoreError) and not isinstance(e, NotFound):
        return ApiError(503, "StoreUnavailable", f"The job store is not available ({e}); try again shortly.")
    return None
