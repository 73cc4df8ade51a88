"""What every command of ``jupyter nbvalidation`` shares: how it is declared (:class:`Command`,
registered by one line in cli/main.py's ``COMMANDS``), its exit statuses and how it prints
an answer (``-o text|json``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, Callable, Literal

from jupyter_nbvalidation.core.model import Phase, Reason

# the exit statuses: 0 the job succeeded, 1 it failed, 2 a usage or input error, 3 an
# infrastructure fault (not the notebook's, not the user's), 130 interrupted (Ctrl-C, SIGTERM)
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INFRASTRUCTURE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Command:
    """One subcommand: ``jupyter nbvalidation NAME``, its ``help`` line, its arguments (added
    by ``arguments`` to its parser) and ``run`` (the parsed arguments → the exit status).
    ``parents``: the shared options it takes: ``common`` (where the jobs are, and ``-o``),
    ``reach`` (where the jobs are) or ``none``."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None]
    parents: Literal["common", "reach", "none"] = "common"


def name_argument(s: argparse.ArgumentParser) -> None:
    """The arguments of a command about one job: its name."""
    s.add_argument("name")


def verdict_exit_code(job: dict[str, Any]) -> int:
    """0 succeeded, 3 an infrastructure fault (not the notebook's), else 1."""
    st = job.get("status") or {}
    if st.get("phase") == Phase.SUCCEEDED:
        return EXIT_OK
    return EXIT_INFRASTRUCTURE if st.get("reason") == Reason.INFRASTRUCTURE_FAILED else EXIT_FAILED


def out(args: argparse.Namespace, obj: Any, text: str) -> None:
    """The answer: ``obj`` as JSON with ``-o json``, else ``text``."""
    print(json.dumps(obj, indent=2) if args.output == "json" else text)
