"""Small asyncio helpers shared by the engine, the stores and the recorder."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

T = TypeVar("T")


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait until each has ended; empties the list."""
    await cancel_and_wait(*tasks)
    tasks.clear()


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended, ignoring how it ended.

    A cancellation of the *caller* still propagates: ``suppress(CancelledError)``
    around ``await task`` would swallow it too, and a worker cancelled there
    (engine stop during a job's cancel) went on to wait on its queue forever."""
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks)
    for t in tasks:
        if not t.cancelled():
            t.exception()  # retrieved: the cancelled work's failure is not the caller's


async def wait_within(aw: Awaitable[T], timeout: float | None) -> T:
    """``asyncio.wait_for`` that never swallows the caller's cancellation.

    Before Python 3.12, ``wait_for`` returns the result instead of raising
    when the caller is cancelled in the moment after ``aw`` finished; a
    worker cancelled by the engine's stop then went back to its queue and
    the stop waited on it forever. On timeout ``aw`` is cancelled and
    ``asyncio.TimeoutError`` raised, as with ``wait_for``."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        await cancel_and_wait(task)  # as wait_for does: the inner work has ended when we raise
        raise
    if not done:
        await cancel_and_wait(task)
        raise asyncio.TimeoutError
    return task.result()
