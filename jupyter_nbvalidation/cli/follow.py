"""Following a job while it runs (``submit --wait``, ``describe --follow``): its phases, the
validation's progress and the build log, printed as they change."""

from __future__ import annotations

import time
from typing import Any, Mapping

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.clients.base import FOLLOW_POLL, Client, ClientError
from jupyter_nbvalidation.core.model import Phase, build_enabled, is_terminal


class Follower:
    """What ``submit --wait`` and ``describe --follow`` print while a job runs:
    each phase once, the validation's progress as it changes, and (``follow_log``)
    the build log as it grows."""

    def __init__(self, quiet: bool = False, follow_log: bool = False, phase: str | None = None):
        self.quiet = quiet
        self.log_done = quiet or not follow_log
        self.offset = 0
        self.phase = phase
        self.progress: tuple[Any, Any] | None = None

    def update(self, job: dict[str, Any]) -> None:
        if self.quiet:
            return
        st = job.get("status") or {}
        name = job["metadata"]["name"]
        phase = render.phase_label(job)
        if phase != self.phase:
            self.phase = phase
            print(f"{time.strftime('%H:%M:%S')}  {name}  {phase:<18} {st.get('message', '')}", flush=True)
        p = st.get("progress")
        if p and st.get("phase") == Phase.VALIDATION_RUNNING:
            key = (p.get("currentCellIndex"), p.get("cellsDone"))
            if key != self.progress:
                self.progress = key
                print(f"{time.strftime('%H:%M:%S')}  {name}  {'':<18} {render.progress_text(p)}", flush=True)

    def wants_log(self, job: Mapping[str, Any]) -> bool:
        return not self.log_done and build_enabled(job["spec"])

    def log(self, data: bytes, complete: bool, next_offset: int) -> None:
        if data:
            for line in data.decode("utf-8", "replace").splitlines():
                print(f"  build | {line}", flush=True)
        self.offset = next_offset
        self.log_done = self.log_done or complete

    def no_log(self) -> None:
        self.log_done = True


def follow(api: Client, name: str, follower: Follower, timeout: float | None) -> dict[str, Any]:
    """Poll a job (through the REST API or this process's service) until it is
    terminal, printing what ``follower`` prints; the job as it ended."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        job = api.get(name)
        follower.update(job)
        terminal = is_terminal((job.get("status") or {}).get("phase"))
        if follower.wants_log(job):
            try:
                follower.log(*api.build_log(name, follower.offset))
            except ClientError as e:
                if e.status != 404:
                    raise
                follower.no_log()
        if terminal:
            return job
        if deadline and time.monotonic() > deadline:
            raise ClientError(f"job {name} did not finish within {timeout:.0f}s")
        time.sleep(FOLLOW_POLL)
