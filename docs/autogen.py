"""The generated reference pages, written at build time by docs/conf.py (as jupyter_server's
docs/autogen_config.py writes its configuration page): the configuration reference from the
traitlets, the REST reference from the OpenAPI document, the CLI reference from the argument parser,
the project settings keys from the spec table.

Each ``*_page()`` returns the page's MyST Markdown; ``write_all(folder)`` writes them into
``docs/reference/`` (git-ignored: nothing generated is committed). tests/house/test_docs.py calls
the same functions."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

PACKAGE = "jupyter_nbvalidation"
PAGES = {"config.md": "config_page", "rest.md": "rest_page", "cli.md": "cli_page", "settings.md": "settings_page"}
# the section a class's traits are configured under when it is not the class's own name
SECTION = {"NBValidationSettings": "NBValidation"}
INTRO = {
    "NBValidation": "The server extension (`jupyter_nbvalidation.composition.NBValidationSettings`, "
                    "inherited by the extension app): the engine, admission, timeouts and submit limits, "
                    "whichever backend runs the jobs. The CLI without a server reads these too.",
    "LocalBackend": "The default backend (`c.NBValidation.backend = \"local\"`): jobs in a SQLite file, "
                    "environments as virtual environments, kernels on this machine.",
    "SQLiteJobStore": "The local backend's job store (`<data dir>/nbvalidation.db`).",
    "KubernetesBackend": "The Kubernetes backend (`c.NBValidation.backend = \"kubernetes\"`, "
                         "`pip install 'jupyter-nbvalidation[kubernetes]'`): jobs as custom resources, "
                         "environments as images, validations as Pods.",
    "KubernetesJobStore": "The Kubernetes backend's job store (the custom resources and their watch cache).",
    "NBValidationService": "The team's validation service behind JupyterHub (`jupyter nbvalidation service`, "
                           "`pip install 'jupyter-nbvalidation[hub]'`): the per-user quotas it adds; every "
                           "`c.NBValidation.*` trait applies to it too (see For a team (JupyterHub)).",
}
# a subclass documented with the traits it adds only (its base's are listed under their section)
ADDS_ONLY = ("NBValidationService",)


def _prose(text: str) -> str:
    """A help string or summary from the code as Markdown text: on one line, and outside its code
    spans `<` (`<jupyter data dir>` would be raw HTML, shown as nothing) and `*` escaped."""
    parts = re.split(r"(`+[^`]*?`+)", " ".join(str(text).split()))
    return "".join(p if p.startswith("`") else re.sub(r"([<*])", r"\\\1", p) for p in parts)


def _cell(text: str) -> str:
    """Text fit for one cell of a Markdown table."""
    return _prose(text).replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that may itself hold backticks."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---- the configuration reference -------------------------------------------------------------

def configurables() -> list[type]:
    """Every traitlets Configurable the package declares whose traits are set in a config file, as
    the class they are configured on: the leaves of the package's class tree (a base class's traits,
    e.g. `Backend.max_retries`, are listed under each backend that inherits them), and the server
    extension's settings under their section, `NBValidation`."""
    from traitlets.config import Configurable

    import jupyter_nbvalidation as pkg

    for module in pkgutil.walk_packages(pkg.__path__, PACKAGE + "."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)

    def subclasses(cls: type) -> list[type]:
        found: list[type] = []
        sub: type
        for sub in cls.__subclasses__():
            found += [sub, *subclasses(sub)]
        return found

    ours = {c for c in subclasses(Configurable) if c.__module__.startswith(PACKAGE + ".")}
    # the extension app inherits NBValidationSettings only to carry its traits: document the settings
    # and the team's service app (a subclass of it) with the traits it adds
    adds_only = [c for c in ours if c.__name__ in ADDS_ONLY]
    ours = {c for c in ours if c.__name__ != "NBValidation" and c.__name__ not in ADDS_ONLY}
    leaves = [c for c in ours if not any(o is not c and issubclass(o, c) for o in ours)] + adds_only
    return sorted((c for c in leaves if own_traits(c)), key=lambda c: (_order(c), section(c)))


def _order(cls: type) -> int:
    names = ["NBValidation", "LocalBackend", "SQLiteJobStore", "KubernetesBackend", "KubernetesJobStore"]
    return names.index(section(cls)) if section(cls) in names else len(names)


def section(cls: type) -> str:
    return SECTION.get(cls.__name__, cls.__name__)


def own_traits(cls: type) -> dict[str, Any]:
    """The configurable traits a class of the package declares (itself or a base class of the
    package), not those of traitlets' or jupyter_server's own classes."""
    own: set[str] = set()
    for klass in cls.__mro__[:1] if cls.__name__ in ADDS_ONLY else cls.__mro__:
        if klass.__module__.startswith(PACKAGE + "."):
            own |= set(vars(klass))
    traits: dict[str, Any] = cls.class_traits(config=True)  # type: ignore[attr-defined]
    return {name: trait for name, trait in sorted(traits.items()) if name in own}


def _default(cls: type, name: str, trait: Any) -> str:
    if name in getattr(cls, "_trait_default_generators", {}):
        return "computed when the object is made (see the description)"
    try:
        return _code(trait.default_value_repr())
    except Exception:  # a Type or Instance trait with no default object
        return _code("None")


def config_page() -> str:
    lines = [
        "# Configuration reference",
        "",
        "% generated by docs/autogen.py from the traitlets of the package's configurable classes: do not edit",
        "",
        "Every trait below is set in `jupyter_server_config.py` (`c.NBValidation.backend = \"kubernetes\"`) "
        "or on the command line (`jupyter lab --NBValidation.max_concurrent_validations=4`). The CLI "
        "working without a server reads the same files. [Configuration](../configuration.md) explains "
        "how they work together; this page is generated from the code, so it is always complete.",
        "",
    ]
    for cls in configurables():
        name = section(cls)
        lines += [f"## {name}", "", f"`{cls.__module__}.{cls.__name__}`", ""]
        if name in INTRO:
            lines += [INTRO[name], ""]
        for trait_name, trait in own_traits(cls).items():
            kind = type(trait).__name__
            if getattr(trait, "values", None):
                kind += " (" + ", ".join(_code(repr(v)) for v in trait.values) + ")"
            if trait.allow_none:
                kind += ", or `None`"
            help_text = _prose(trait.help or "(no description)")
            lines += [
                f"### `c.{name}.{trait_name}`",
                "",
                f"{kind}; default: {_default(cls, trait_name, trait)}",
                "",
                help_text,
                "",
            ]
    return "\n".join(lines)


# ---- the REST reference ----------------------------------------------------------------------

def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array" and "items" in schema:
        return f"array of {_schema_name(schema['items'])}"
    kind = str(schema.get("type", "object"))
    if "enum" in schema:
        kind += " (" + ", ".join(str(v) for v in schema["enum"]) + ")"
    return kind


def rest_page() -> str:
    from jupyter_nbvalidation.service.openapi import openapi_document

    document = openapi_document("/")
    lines = [
        "# REST reference",
        "",
        "% generated by docs/autogen.py from jupyter_nbvalidation/service/openapi.py: do not edit",
        "",
        f"{document['info']['description']} Every path below is under `{document['servers'][0]['url']}` "
        "(after the server's `base_url`); the document itself is served at `…/openapi.json`. "
        "[REST API](../rest-api.md) tells how the routes are used together.",
        "",
    ]
    methods = ("get", "post", "put", "patch", "delete")
    for path, item in document["paths"].items():
        shared = item.get("parameters", [])
        for method in (m for m in methods if m in item):
            op = item[method]
            lines += [f"## `{method.upper()} {path}`", "", _prose(op.get("summary", "")), ""]
            params = [_resolve(document, p) for p in [*shared, *op.get("parameters", [])]]
            if params:
                lines += ["| parameter | in | required | type | meaning |", "| --- | --- | --- | --- | --- |"]
                for p in params:
                    default = p.get("schema", {}).get("default")
                    meaning = p.get("description", "") + (f" (default `{default}`)" if default is not None else "")
                    lines.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                                 f"{_cell(_schema_name(p.get('schema')))} | {_cell(meaning)} |")
                lines.append("")
            if "requestBody" in op:
                body = _resolve(document, op["requestBody"])
                kinds = ", ".join(f"`{k}` ({_schema_name(v.get('schema'))})" for k, v in body.get("content", {}).items())
                lines += [f"Request body{' (required)' if body.get('required') else ''}: {kinds}", ""]
            lines += ["| status | meaning | body |", "| --- | --- | --- |"]
            for status, response in op["responses"].items():
                response = _resolve(document, response)
                content = ", ".join(f"`{k}` {_schema_name(v.get('schema'))}".strip()
                                    for k, v in response.get("content", {}).items())
                headers = ", ".join(f"`{h}`" for h in response.get("headers", {}))
                meaning = response.get("description", "") + (f"; headers {headers}" if headers else "")
                lines.append(f"| {status} | {_cell(meaning)} | {_cell(content)} |")
            lines.append("")
    lines += ["## Schemas", "",
              "The request and answer bodies, as the OpenAPI document declares them.", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += [f"### {name}", "", "```json", json.dumps(schema, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


# ---- the CLI reference -----------------------------------------------------------------------

def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Each subcommand's parser and its one-line help, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def documented_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments `--help` shows (not the hidden ones, nor -h)."""
    return [a for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _option_line(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    if action.option_strings:
        metavar = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
        name = ", ".join(f"{o}{metavar}" for o in action.option_strings)
    else:
        name = formatter._format_args(action, action.dest)
    help_text = formatter._expand_help(action) if action.help else ""
    extra = []
    if action.choices is not None and "{" not in name:
        extra.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if (action.option_strings and action.nargs != 0 and action.default not in (None, [], argparse.SUPPRESS)
            and "default" not in help_text):
        extra.append(f"default `{action.default}`")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in help_text:
        extra.append("repeatable")
    text = _prose(help_text)
    tail = f" ({'; '.join(extra)})" if extra else ""
    if not text:
        return f"- {_code(name)}{tail}"
    return f"- {_code(name)}: {text}{tail}"


def cli_page() -> str:
    from jupyter_nbvalidation.cli.main import parser as make_parser

    parser = make_parser()
    lines = [
        "# CLI reference",
        "",
        "% generated by docs/autogen.py from jupyter_nbvalidation.cli.main.parser(): do not edit",
        "",
        f"`{parser.prog}`: {parser.description or ''} Every subcommand below takes `-h` / `--help`. "
        "[The CLI and CI](../cli.md) tells how they are used (exit codes, `run`, JUnit, the pytest plugin).",
        "",
    ]
    for name, (sub, help_text) in subcommands(parser).items():
        lines += [f"## `{name}`", "", (help_text[:1].upper() + help_text[1:]).rstrip(".") + ".", "",
                  "```text", sub.format_usage().strip(), "```", ""]
        lines += [_option_line(sub, a) for a in documented_options(sub)]
        lines.append("")
    return "\n".join(lines)


# ---- the project settings keys ----------------------------------------------------------------

def settings_page() -> str:
    """Every key of ``[tool.nbvalidation]`` / ``nbvalidation.toml``: the spec table's fields minus
    ``notebook`` (core/spec_table.py), with their kind, what they do and the command-line option
    that gives the same value (and wins over the file)."""
    from jupyter_nbvalidation.core.spec_table import Field, walk

    lines = [
        "# Project settings keys",
        "",
        "% generated by docs/autogen.py from jupyter_nbvalidation/core/spec_table.py: do not edit",
        "",
        "Every key the project settings file takes, in the defaults (`[tool.nbvalidation]`, or the top "
        "level of `nbvalidation.toml`) and in each `[[tool.nbvalidation.notebooks]]` entry (beside its "
        "`glob`): the job spec's fields minus `notebook`, with the same names and shapes as in "
        "[the job spec](../job-spec.md). A dotted key is a key of a table: `comparisonConfig.lax` is "
        "`comparisonConfig = { lax = true }`. Any other key is an error naming the file, the line and the "
        "key. How they are found and merged: [Project settings](../project-settings.md).",
        "",
        "| key | value | what | on the command line (wins over the file) |",
        "| --- | --- | --- | --- |",
    ]
    for path, entry in walk():
        if path.split(".")[0] == "notebook" or not isinstance(entry, Field):
            continue
        note = " (relative to the notebook's folder)" if path == "goldenNotebook.path" else ""
        flags = ", ".join(_code(f) for c in entry.cli for f in c.flags) or "—"
        if path == "goldenNotebook.path":
            flags = "`--golden` (`submit`), `--golden-suffix`, `--golden-self` (`run`)"
        lines.append(f"| {_code(path)} | {entry.kind} | {_cell(entry.description + note)} | {flags} |")
    return "\n".join(lines) + "\n"


def write_all(folder: Path) -> list[Path]:
    """Write the pages into `folder` (rewritten only when they change, so a rebuild of the
    site does not read them again)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, function in PAGES.items():
        path = folder / file_name
        text = globals()[function]()
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written
