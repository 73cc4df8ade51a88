"""The CLI's commands as cli/main.py registers them: each module's Command is in
``COMMANDS`` (one line), and the search behind ``bisect`` keeps the CLI's exit statuses
while importing nothing of the CLI, the clients or the service."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from import_graph import read_imports

import jupyter_nbvalidation.cli as cli_package
import jupyter_nbvalidation.cli.command as command
import jupyter_nbvalidation.why_red.bisect as bisect_search
from jupyter_nbvalidation.cli.main import COMMANDS, parser


def _declared() -> list[command.Command]:
    found = []
    for info in pkgutil.iter_modules(cli_package.__path__):
        module = importlib.import_module(f"{cli_package.__name__}.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, command.Command)]
    return found


def test_every_command_declared_is_registered_once_and_parsed():
    declared = {id(c): c for c in _declared()}
    assert {id(c) for c in COMMANDS} == set(declared), "a Command not in cli.main.COMMANDS (or one twice)"
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))
    subparsers = next(a for a in parser()._actions if a.dest == "command")
    assert list(subparsers.choices) == names


def test_the_search_answers_with_the_clis_exit_statuses():
    assert (bisect_search.EXIT_OK, bisect_search.EXIT_FAILED, bisect_search.EXIT_ERROR,
            bisect_search.EXIT_INFRASTRUCTURE, bisect_search.EXIT_INTERRUPTED) == (
        command.EXIT_OK, command.EXIT_FAILED, command.EXIT_ERROR, command.EXIT_INFRASTRUCTURE,
        command.EXIT_INTERRUPTED)


def test_the_search_imports_no_cli_client_composition_or_service():
    path = Path(bisect_search.__file__)
    records = read_imports(path, path.parents[2])  # import_graph's reader: `from x import y` counts as x
    names = {r.name for r in records if r.source is None} | {r.source for r in records if r.source is not None}
    wrong = {n for n in names if n.startswith(("jupyter_nbvalidation.cli", "jupyter_nbvalidation.clients",
                                              "jupyter_nbvalidation.composition", "jupyter_nbvalidation.service"))}
    assert not wrong, wrong
