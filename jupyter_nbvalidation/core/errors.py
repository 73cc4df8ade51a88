"""Domain errors the ports raise, free of HTTP (docs/architecture.md, "Walls").

A backend or a store says *what* went wrong; the service layer
(``service.py``) is the one place that turns it into an HTTP status and the
stable error body. The two failure kinds follow kopf's distinction: a
temporary failure is worth retrying, a permanent one is not.
"""

from __future__ import annotations


class InputRejected(Exception):
    """The submitted inputs cannot be used: a client mistake, reported at
    submit naming the field. ``status`` is a hint for the HTTP mapping (400
    unless the input is e.g. too large, 413); ``code`` is the stable error
    code of the REST API."""

    def __init__(self, message: str, field: str | None = None, *, status: int = 400,
                 code: str = "InvalidField") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status
        self.code = code


class TemporaryFailure(Exception):
    """Worth retrying: the cause may go away (an unreachable API server, a
    conflict). ``delay`` is a suggested wait in seconds, if known. The engine
    leaves the job's phase as it is and retries with capped, jittered
    exponential backoff, waiting at least ``delay``; the phase timeouts keep
    running."""

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentFailure(Exception):
    """Not worth retrying: the same call will fail the same way. The engine
    fails the job with its phase's failure reason (``InvalidInput``,
    ``BuildFailed``, ``ValidationFailed``) unless ``reason`` names another
    one; the message names the object and the cause (already free of
    secrets)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


# -- what a store raises (store/base.py re-exports them with the port) --------------

class StoreError(Exception):
    """A store operation failed (not a conflict, not a missing object)."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    """The object changed since it was read (stale resourceVersion)."""


class StoreBroken(StoreError):
    """The store cannot be used until someone repairs it (a file that is not a
    database, a corrupt one): waiting does not help, the message says what."""

    permanent = True  # trying again cannot help (the event recorder does not)


class NoSpace(StoreError):
    """The data dir's disk (or the user's quota) is full: nothing can be recorded until space
    is freed. The message names the device, the path and the free space (core/space.py)."""
