"""Small asyncio helpers shared by the engine, the stores and the recorder."""

from __future__ import annotations

import asyncio


async def cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel background tasks and wait until each has ended; empties the list."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel ``task`` and wait until it has ended, ignoring how it ended.

    A cancellation of the *caller* still propagates: ``suppress(CancelledError)``
    around ``await task`` would swallow it too, and a worker cancelled there
    (engine stop during a job's cancel) went on to wait on its queue forever."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: the cancelled work's failure is not the caller's
