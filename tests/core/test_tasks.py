"""The asyncio helpers every background task relies on: a stop must be able
to cancel any worker, whatever it is waiting for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers import slow_to_stop

import jupyter_nbvalidation
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within


@pytest.mark.asyncio
async def test_wait_within_lets_the_callers_cancellation_through_when_the_work_just_finished():
    """The moment that hung CI: the awaited work has finished, the caller has
    not resumed yet, and the engine's stop cancels it. (Python 3.11's
    asyncio.wait_for returns the result here and the cancellation is lost.)"""
    fut = asyncio.get_running_loop().create_future()
    caller = asyncio.create_task(wait_within(fut, 10))
    await asyncio.sleep(0)  # the caller now waits
    fut.set_result(1)
    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=5)
    assert caller in done and caller.cancelled()


@pytest.mark.asyncio
async def test_wait_within_cancels_the_work_and_waits_for_it_when_the_caller_is_cancelled():
    ended = asyncio.Event()
    caller = asyncio.create_task(wait_within(slow_to_stop(asyncio.Event(), ended, cleanup=0.05), 10))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended.is_set(), "the caller ended before the work it waited for"


@pytest.mark.asyncio
async def test_wait_within_result_error_and_timeout():
    async def value():
        await asyncio.sleep(0)
        return 42

    async def boom():
        raise ValueError("inner")

    assert await wait_within(value(), 5) == 42
    assert await wait_within(value(), None) == 42
    with pytest.raises(ValueError, match="inner"):
        await wait_within(boom(), 5)
    slow = asyncio.ensure_future(asyncio.sleep(3600))
    with pytest.raises(asyncio.TimeoutError):
        await wait_within(slow, 0.05)
    assert slow.cancelled()


@pytest.mark.asyncio
async def test_cancel_and_wait_ends_the_task_and_keeps_the_callers_cancellation():
    stopping = asyncio.Event()
    inner = asyncio.create_task(slow_to_stop(stopping))
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel_and_wait(inner))
    await asyncio.wait_for(stopping.wait(), 5)
    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=5)
    assert caller in done and caller.cancelled()
    await asyncio.wait({inner}, timeout=5)
    assert inner.cancelled()


def test_the_package_does_not_use_asyncio_wait_for():
    """House rule: wait_within instead (see its docstring)."""
    root = Path(jupyter_nbvalidation.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "tasks.py" and "asyncio.wait_for(" in p.read_text(encoding="utf-8")]
    assert offenders == []
