"""``status.progress`` of a running validation Pod, read from its runner's log.

The runner in the Pod runs with ``--progress``: it prints one
``NBVALIDATION-PROGRESS`` record per step on stdout (``runner/protocol.py``),
which the kubelet keeps as the container's log, beside the final
``NBVALIDATION-RESULT`` / ``NBVALIDATION-EXECUTED`` lines (records and result
lines never mix: :func:`~jupyter_nbvalidation.runner.protocol.parse_log` reads
only its own prefixes, and the termination message is the result's summary,
not the log). :class:`PodProgress` reads what the log gained since its last
read and feeds it to the same :class:`ProgressReader` the local backend uses,
so ``status.progress`` has one shape on both backends.

Reading only what is new. The log API has no byte offset, so a read asks for
``timestamps=true`` (every line starts with its RFC 3339 time, nanoseconds)
and ``sinceTime`` (whole seconds: the second of the last line read); the lines
read before are skipped by their timestamp, and among lines of the very same
timestamp by their count. ``limitBytes`` bounds a read; a line cut by it is
read again next time, and a single line longer than a read (a huge result
line, a kernel's output) is stepped over. So:

- a Pod not started yet (no container id) is not read at all; a log that
  cannot be read (404, 400 "waiting to start", an API server away) changes
  nothing: the next read tries again;
- log rotation by the kubelet drops old lines, never the new ones a read asks
  for;
- a container that starts again (a new container id, or a new Pod of the same
  name) starts the progress afresh: its records are a new run.

At the end the whole log, read once anyway for the verdict, gives the final
progress when it still holds the run's first record (``plan``); else what was
read along the way stands, after one last read.

Pure: the reads go through the function passed in (the backend's container
log read), so the tests drive it with stand-ins.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, cast

from jupyter_nbvalidation.core.documents import Progress
from jupyter_nbvalidation.runner.protocol import PROGRESS_PLAN, PROGRESS_PREFIX, ProgressReader, parse_progress

READ_LIMIT = 256 * 1024  # bytes of log one progress read may bring (limitBytes)

#: a read of the log: query parameters -> its text, or None when it cannot be read
LogRead = Callable[[dict[str, str]], Awaitable["str | None"]]
Stamp = tuple[str, int]  # ("2026-12-01T15:54:30", nanoseconds): orders like the time it names


def parse_stamp(text: str) -> Stamp | None:
    """The kubelet's line timestamp (``2026-12-01T15:54:30.562419301Z``, trailing
    zeros of the fraction trimmed) as a comparable pair, or None."""
    if not text.endswith("Z"):
        return None
    whole, _, fraction = text[:-1].partition(".")
    if len(whole) != 19 or whole[10] != "T" or (fraction and not fraction.isdigit()) or len(fraction) > 9:
        return None
    return whole, int(fraction.ljust(9, "0")) if fraction else 0


def _next_second(stamp: Stamp) -> Stamp:

    t = _dt.datetime.strptime(stamp[0], "%Y-%m-%dT%H:%M:%S") + _dt.timedelta(seconds=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S"), -1  # before any line of that second


def holds_run_start(log: str | None) -> bool:
    """Whether ``log`` (a whole container log) still holds the run's first progress
    record (the ``plan``): then it holds every record after it too."""
    return log is not None and any(e.get("event") == PROGRESS_PLAN for e in parse_progress(log))


def container_instance(pod: dict[str, Any], container: str) -> str | None:
    """Which run of ``container`` the log is of (the Pod's uid and the container
    id), None while it has not started."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container and cs.get("containerID"):
            return f"{pod['metadata'].get('uid', '')}/{cs['containerID']}"
    return None


@dataclass
class PodProgress:
    """The progress of one validation Pod's runner, read from its log as it grows."""

    reader: ProgressReader = field(default_factory=ProgressReader)
    instance: str | None = None  # container_instance of the log read so far
    position: Stamp | None = None  # the timestamp of the last line read
    same: int = 0  # lines read with exactly that timestamp
    read_at: float = -math.inf  # time.monotonic() of the last read
    reads: int = 0

    def due(self, interval: float) -> bool:
        return time.monotonic() - self.read_at >= interval

    def snapshot(self) -> Progress | None:
        return cast("Progress | None", self.reader.snapshot())

    def restart(self, instance: str | None) -> None:
        """Another run of the container: its records start the progress afresh."""
        self.reader = ProgressReader()
        self.instance, self.position, self.same = instance, None, 0

    def query(self, limit: int = READ_LIMIT) -> dict[str, str]:
        q = {"timestamps": "true", "limitBytes": str(limit)}
        if self.position is not None:
            q["sinceTime"] = self.position[0] + "Z"
        return q

    async def read(self, pod: dict[str, Any], container: str, fetch: LogRead, limit: int = READ_LIMIT) -> bool:
        """Read what the log gained since the last read; True when the progress
        changed. Nothing happens before the container started."""
        instance = container_instance(pod, container)
        if instance is None:
            return False
        if instance != self.instance:
            self.restart(instance)
        self.read_at = time.monotonic()
        text = await fetch(self.query(limit))
        self.reads += 1
        if text is None:
            return False
        return self.take(text, cut=len(text.encode("utf-8", "replace")) >= limit)

    def take(self, text: str, *, cut: bool) -> bool:
        """Feed the new lines of one read (``cut``: the read hit its byte limit)."""
        lines = text.split("\n")
        tail = lines.pop()  # "" when the text ends with a newline, else a line not complete yet
        changed = fresh = False
        at_position = 0  # lines of this read with exactly the timestamp of the last line read
        for line in lines:
            head, _, rest = line.partition(" ")
            stamp = parse_stamp(head)
            if stamp is None:
                continue
            if self.position is not None and stamp <= self.position:
                if stamp < self.position:
                    continue
                at_position += 1
                if at_position <= self.same:  # read before
                    continue
                self.same = at_position
            else:
                self.position, self.same, at_position = stamp, 1, 1
            fresh = True
            if rest.startswith(PROGRESS_PREFIX):
                changed = self.reader.feed_line(rest) or changed
        if cut and not fresh:
            # nothing new fits in a read from this second (one line longer than a
            # read, or more of that second than a read holds): go on from the next
            # second, else every read brings the same. What is stepped over is read
            # again at the end, from the whole log (final)
            stamps = [s for s in (parse_stamp(tail.partition(" ")[0]), self.position) if s is not None]
            if stamps:
                self.position, self.same = _next_second(max(stamps)), 0
        return changed

    def final(self, whole_log: str | None) -> Progress | None:
        """The progress as the run ended: from the whole log when it still holds
        the run's first record, else what was read along the way."""
        if holds_run_start(whole_log):
            assert whole_log is not None
            reader = ProgressReader()
            reader.feed_text(whole_log)
            self.reader = reader
        return self.snapshot()
