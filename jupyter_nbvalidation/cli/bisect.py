"""``jupyter nbvalidation bisect NOTEBOOK`` (issue 22): which package changes since the
notebook's last success turned it red. The search is why_red.bisect.search (the server's
**Find the cause** runs it too); here it runs over this command's client (the engine in this
process too, without a server), its steps printed as they end. Exits: the search's
``exitCode`` (0 a culprit set found, 1 none, or the notebook itself changed; 2 cannot bisect;
3 the last success's environment cannot be built, or a step ended by infrastructure), 130
interrupted (the running step's job cancelled).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jupyter_nbvalidation.cli.command import EXIT_INTERRUPTED, Command
from jupyter_nbvalidation.cli.connect import connect
from jupyter_nbvalidation.cli.interrupts import interrupt_signals
from jupyter_nbvalidation.clients.base import INTERRUPT_GRACE, Client, ClientError
from jupyter_nbvalidation.clients.in_process import InProcess
from jupyter_nbvalidation.core.model import is_terminal
from jupyter_nbvalidation.why_red.bisect import Stop, search


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("notebook")
    s.add_argument("--job", help="the failing job to explain (default: the notebook's newest Failed job)")
    s.add_argument("--max-steps", type=int, default=12, metavar="N",
                   help="at most N validations in all (default: 12)")
    s.add_argument("--step-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up waiting for one step after this many seconds")


def cmd_bisect(args: argparse.Namespace) -> int:
    """Search which package changes since the last success turned the notebook red."""
    if not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    if args.max_steps < 1:
        raise ClientError("--max-steps must be at least 1")
    api = connect(args, args.notebook)
    quiet = args.output == "json"
    try:
        return _bisect(args, api, quiet)
    except Stop as e:
        if quiet:
            print(json.dumps({"result": "error", "exitCode": e.code, "message": e.message}, indent=2))
        print(f"bisect: {e.message}", file=sys.stderr)
        return e.code
    finally:
        if isinstance(api, InProcess):
            api.close()


def _bisect(args: argparse.Namespace, api: Client, quiet: bool) -> int:
    """The command: the search in this process (the engine too, without a server), its
    steps printed as they end, Ctrl-C cancelling the running step."""
    path = api.api_path(args.notebook)
    current: list[str | None] = [None]

    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    started = isinstance(api, InProcess)
    if isinstance(api, InProcess):
        api.begin()
    interrupted = False
    try:
        with interrupt_signals():
            try:
                result = search(api, path, args.job, args.max_steps, args.step_timeout, say, current)
            except KeyboardInterrupt:
                interrupted = True
                return _interrupted(api, current[0])
    finally:
        if started and isinstance(api, InProcess):
            api.end(interrupted=interrupted)
    if quiet:
        print(json.dumps(result, indent=2))
    else:
        for n in result["notes"]:
            print(f"note: {n}")
        print(result["message"])
    return int(result["exitCode"])


def _interrupted(api: Client, name: str | None) -> int:
    """After Ctrl-C: the running step's job cancelled (waited for a moment), said so; exit 130."""
    if name is None:
        print("\ninterrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    said = "cancelled"
    try:
        job = api.cancel(name)
        if not is_terminal(str((job.get("status") or {}).get("phase") or "")):
            try:
                job = api.wait(name, lambda j: None, INTERRUPT_GRACE)
            except Exception:  # not ended within the grace: the engine goes on cancelling it
                pass
        st = job.get("status") or {}
        said = f"cancelled ({st.get('phase') or 'Pending'}" + (f", {st['reason']})" if st.get("reason") else ")")
    except ClientError as e:
        said = f"could not be cancelled: {e}"
    print(f"\ninterrupted: step job {name} {said}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


BISECT = Command("bisect", "which package changes since the last success turned a notebook red: re-validates "
                           "with the last success's exact pins, then searches the changed distributions "
                           "(each step a probe job, hidden from the notebook's job list)", cmd_bisect, arguments)
