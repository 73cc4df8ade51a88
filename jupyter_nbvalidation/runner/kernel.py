"""The kernel's process, apart from the cells it runs: its log, its answers on the
shell channel, and its stop (a graceful one: the kernel ends what it started and says
so; else terminated, then killed), with the process group it leaves behind."""

from __future__ import annotations

import asyncio
import os
import signal
from queue import Empty
from typing import Any

# a graceful stop: how long the kernel may take to end what it started (ipykernel terminates its
# children, then says so on IOPub), then how long its process may take to exit once it has said so
SHUTDOWN_ACTIONS_LIMIT = 5.0
KERNEL_EXIT_GRACE = 0.5


def kill_process_group(pgid: int | None) -> None:
    if not pgid or not hasattr(os, "killpg") or pgid == os.getpgid(0):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


async def stop_kernel(km: Any, kc: Any) -> None:
    """Stop a kernel that finished its cells: ask it to shut down, wait until it has ended
    what it started (ipykernel terminates its child processes, then broadcasts its
    ``shutdown_reply`` on IOPub; an older kernel that never says so is waited for up to
    SHUTDOWN_ACTIONS_LIMIT, or until it exits), then give its process KERNEL_EXIT_GRACE to
    exit before it is terminated (SIGTERM), and as long again before it is killed.

    Not ``shutdown_kernel()``, which terminates a kernel only half of ``shutdown_wait_time``
    (5 s) after the request: ipykernel 7 sometimes hangs once it has replied (its control
    thread waits out a 10 s flush of an IOPub thread that has already stopped), which cost a
    validation 2.5 s to 3.5 s in about one run in seven behind the sandbox. Nothing the kernel
    does after its reply is part of the verdict: the cells have run and their outputs are in."""
    await maybe_await(km.request_shutdown())
    if kc is not None:
        await _kernel_said_it_shut_down(km, kc, SHUTDOWN_ACTIONS_LIMIT)
    await maybe_await(km.finish_shutdown(waittime=2 * KERNEL_EXIT_GRACE))


async def _kernel_said_it_shut_down(km: Any, kc: Any, limit: float) -> None:
    """Until the kernel's ``shutdown_reply`` on IOPub, its process gone, or ``limit`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while (left := deadline - loop.time()) > 0:
        try:
            msg = await maybe_await(kc.iopub_channel.get_msg(timeout=min(left, 0.1)))
        except Empty:
            if not await maybe_await(km.is_alive()):
                return
            continue
        except Exception:  # the channel closed under us: the process decides
            return
        if (msg.get("header") or {}).get("msg_type") == "shutdown_reply":
            return


async def maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def read_log(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


async def shell_reply(kc: Any, msg_id: str) -> dict[str, Any]:
    while True:
        try:
            msg = await kc.shell_channel.get_msg(timeout=1)
        except Empty:
            if not await maybe_await(kc.is_alive()):
                raise RuntimeError("the kernel died before it answered") from None
            continue
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            found: dict[str, Any] = msg
            return found
