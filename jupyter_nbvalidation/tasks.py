"""Small asyncio helpers shared by the engine, the stores and the recorder."""

from __future__ import annotations

import asyncio


async def cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel background tasks and wait until each has ended; empties the list."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
