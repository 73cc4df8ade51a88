"""Ctrl-C and SIGTERM in a command: the first one cancels what the command started (its
job, its batch's jobs, its bisect step), a second one ends the process at once (exit 130).
An in-process ``submit --wait`` handles them on its loop (clients.in_process.loop_interrupts)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.cli.command import EXIT_INTERRUPTED
from jupyter_nbvalidation.clients.base import Client, ClientError
from jupyter_nbvalidation.core.model import is_terminal


@contextlib.contextmanager
def interrupt_signals() -> Any:
    """While inside: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (the
    caller cancels what it started), and a second one ends the process at once (exit 130).
    Outside the main thread, nothing changes."""
    came: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        came.append(signum)
        if len(came) > 1:
            os._exit(130)  # the user insists: no more waiting
        raise KeyboardInterrupt

    old = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, on_signal)
    except ValueError:  # not the main thread
        pass
    try:
        yield came
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def cancel_interrupted(api: Client, name: str) -> int:
    """After Ctrl-C of ``submit --wait`` through a server: the job is cancelled there (its
    build or its runner and kernel stop), the state it was left in is printed; exit 130."""
    try:
        job = api.cancel(name)
        phase = (job.get("status") or {}).get("phase") or "Pending"
        said = f"cancelled (it was {phase})" if not is_terminal(phase) else f"had ended: {render.verdict_line(job)}"
    except ClientError as e:
        said = f"could not be cancelled: {e}"
    print(f"\ninterrupted: job {name} {said}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED
