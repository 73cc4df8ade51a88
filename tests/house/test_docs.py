"""The docs stay true: every configurable trait is documented, the README (the front door) opens
with the two fresh-machine commands and CI runs the second, the docs site's pages exist and are
in its toctree, and the three generated references (configuration, REST, CLI) list everything the
code declares. The README's former content lives in the pages of docs/ (the Sphinx site)."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


def _toctree_pages() -> list[str]:
    """The documents the site's toctrees name (docs/index.md), in order."""
    index = (DOCS / "index.md").read_text()
    pages = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", index, re.S):
        pages += [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith(":")]
    return pages


def _page(name: str) -> str:
    return (DOCS / f"{name}.md").read_text()


def _hand_pages() -> dict[str, str]:
    """The written pages of the site (the generated references aside), by name."""
    return {name: _page(name) for name in _toctree_pages() if not name.startswith("reference/")}


DOCS_TEXT = "\n".join(_hand_pages().values())


def _autogen() -> ModuleType:
    """docs/autogen.py, the generator docs/conf.py runs at build time."""
    spec = importlib.util.spec_from_file_location("nbv_docs_autogen", DOCS / "autogen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _configurables():
    from jupyter_nbvalidation.app import NBValidation
    from jupyter_nbvalidation.backends.local import LocalBackend

    classes = [NBValidation, LocalBackend]
    from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
    from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore

    classes += [KubernetesBackend, KubernetesJobStore]
    for cls in classes:
        own = set()
        for klass in cls.__mro__:
            if klass.__module__.startswith("jupyter_nbvalidation"):
                own |= set(vars(klass))
        for name in cls.class_traits(config=True):
            if name in own:
                yield f"{cls.__name__}.{name}"


def test_every_trait_is_documented():
    """In the written pages (Configuration, Kubernetes), with what the help string does not say."""
    missing = [t for t in _configurables() if f"`{t}`" not in DOCS_TEXT]
    assert not missing, f"the docs lack: {missing}"


def _spec_table_rows() -> set[str]:
    """The field names the job spec page's "spec field" table documents: each row's first column
    names one or more fields (`a` / `b`, `a`, `b`); a name without a dot after `a.b` is its sibling."""
    page = _page("job-spec")
    table = page[page.index("| spec field | meaning |"):]
    table = table[:table.index("\n\n")]
    names: set[str] = set()
    for row in table.splitlines()[2:]:
        last = ""
        for name in re.findall(r"`([A-Za-z.]+)`", row.split("|")[1]):
            if "." not in name and "." in last:
                name = last.rsplit(".", 1)[0] + "." + name
            names.add(name)
            last = name
    return names


def test_every_spec_field_is_in_the_readmes_table_and_nothing_else_is():
    """The table moved from the README to docs/job-spec.md."""
    from jupyter_nbvalidation.core.spec_table import leaf_paths

    documented, fields = _spec_table_rows(), leaf_paths()
    assert not fields - documented, f"the spec field table lacks {sorted(fields - documented)}"
    assert not documented - fields, f"the spec field table names what is no field: {sorted(documented - fields)}"


def _first_bash_block(text: str) -> list[str]:
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [ln for ln in first_block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    commands = _first_bash_block(README)
    assert len(commands) == 2
    assert "jupyter lab" in commands[0] and "pip install ." in commands[0]
    assert commands[1] == "bash tools/setup-and-test.sh"
    assert "tools/setup-and-test.sh" in (ROOT / ".ci" / "run").read_text()
    # Get started opens with the same two
    assert _first_bash_block(_page("get-started")) == commands


def test_the_readme_is_a_front_door():
    """At most 200 lines: what the tool is, one screenshot of the panel, the two commands, a short
    tour, and links into the docs pages, each of which exists."""
    assert len(README.splitlines()) <= 200
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert shots == ["docs/screenshots/validation-panel.png"] and (ROOT / shots[0]).is_file()
    links = set(re.findall(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)", README))
    assert {f"docs/{p}.md" for p in _hand_pages()} <= links, "the README links every written page"
    assert all((ROOT / link).is_file() for link in links), links
    # paths follow the package's layout
    assert "jupyter_nbvalidation/backends/kubernetes/manifests/" in README
    written = "\n".join(text for name, text in _hand_pages().items() if name != "architecture")
    for path in re.findall(r"\bjupyter_nbvalidation/[\w/.-]*[\w/]", README + written):
        assert (ROOT / path.rstrip("/")).exists() or (ROOT / f"{path}.py").exists(), path


@pytest.mark.parametrize("page", ["development", "architecture"])
def test_the_module_maps_name_modules_that_exist(page):
    """docs/architecture.md and the development page's module map (the README's, moved) name real files."""
    pkg = ROOT / "jupyter_nbvalidation"
    for doc in (_page(page),):
        names = set(re.findall(r"\b((?:[a-z_0-9]+/)*[a-z_0-9]+\.py)\b", doc))
        assert len(names) > 10
        missing = [n for n in sorted(names) if not ((pkg / n).exists() or (ROOT / n).exists()
                                                    or any(pkg.rglob(n)) or any((ROOT / "tests").rglob(n)))]
        assert not missing, f"the module map names missing files: {missing}"


def test_the_slow_list_names_tests_that_exist():
    """tests/conftest.py SLOW_TESTS / SLOW_MODULES (the `-m "not slow"` tier): a renamed test
    would silently join the inner loop."""
    import ast

    from conftest import SLOW_MODULES, SLOW_TESTS

    for module in SLOW_MODULES:
        assert list((ROOT / "tests").rglob(f"{module}.py")), module
    for module, names in SLOW_TESTS.items():
        tree = ast.parse(next((ROOT / "tests").rglob(f"{module}.py")).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert set(names) <= defined, f"{module} has no {sorted(set(names) - defined)}"


# ---- the docs site is wired ------------------------------------------------------------------

def test_every_page_of_the_toctree_exists_and_every_page_is_in_it():
    pages = _toctree_pages()
    assert len(pages) == len(set(pages))
    for required in ("get-started", "jupyterlab", "cli", "environments", "golden", "turning-red",
                     "kubernetes", "reference/config", "reference/rest", "reference/cli", "architecture",
                     "benchmarks"):
        assert required in pages, required
    autogen = _autogen()
    generated = {f"reference/{name[:-3]}" for name in autogen.PAGES}
    assert generated == {p for p in pages if p.startswith("reference/")}
    for page in set(pages) - generated:
        assert (DOCS / f"{page}.md").is_file(), page
    conf = (DOCS / "conf.py").read_text()
    excluded = set(re.findall(r'"([\w./-]+\.md)"', conf))
    written = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.glob("*.md")}
    assert written - {"index"} - {e[:-3] for e in excluded} == set(pages) - generated, \
        "a page of docs/ outside the toctree (Sphinx warns, and -W fails)"


def test_the_docs_build_is_wired_into_ci_and_the_generated_pages_are_not_committed():
    conf = (DOCS / "conf.py").read_text()
    assert 'autogen.write_all(HERE / "reference")' in conf
    assert "myst_parser" in conf and 'html_theme = "pydata_sphinx_theme"' in conf
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    assert "docs/_build/" in gitignore and "docs/reference/" in gitignore
    setup = (ROOT / "tools" / "setup-and-test.sh").read_text()
    lint = setup[setup.index("lint_and_jest() {"):]
    lint = lint[:lint.index("\n}\n")]
    assert "sphinx-build -W -q -b html docs docs/_build/html || rc=1" in lint
    assert '-e ".[test,docs,hub]"' in setup
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    docs = " ".join(extras["docs"])
    # every configurable class imports for the configuration reference: the Kubernetes backend's and
    # the team's service's (jupyterhub) too
    for needed in ("sphinx", "myst-parser", "pydata-sphinx-theme", "jupyter-nbvalidation[kubernetes,hub]"):
        assert needed in docs, needed


def test_the_configuration_reference_lists_every_trait_of_every_configurable():
    from traitlets.config import Configurable

    from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
    from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore
    from jupyter_nbvalidation.backends.local import LocalBackend
    from jupyter_nbvalidation.composition import NBValidationSettings
    from jupyter_nbvalidation.store.sqlite import SQLiteJobStore

    autogen = _autogen()
    classes = autogen.configurables()
    assert {NBValidationSettings, LocalBackend, KubernetesBackend, SQLiteJobStore, KubernetesJobStore} <= set(classes)
    # every Configurable the package declares is there, or is a base class whose traits its subclasses list
    for module_file in (ROOT / "jupyter_nbvalidation").rglob("*.py"):
        for name in re.findall(r"^class (\w+)\(.*(?:Configurable|Backend|JobStore)\b", module_file.read_text(), re.M):
            module = ".".join(module_file.relative_to(ROOT).with_suffix("").parts)
            cls = getattr(__import__(module, fromlist=[name]), name)
            if issubclass(cls, Configurable) and autogen.own_traits(cls):
                assert cls in classes or any(issubclass(c, cls) for c in classes), cls
    page = autogen.config_page()
    expected = {f"c.{autogen.section(cls)}.{trait}" for cls in classes for trait in autogen.own_traits(cls)}
    assert {f"c.{t}" for t in _configurables()} <= expected
    listed = set(re.findall(r"^### `(c\.[\w.]+)`$", page, re.M))
    assert listed == expected, sorted(listed ^ expected)
    for cls in classes:
        for trait in autogen.own_traits(cls).values():
            assert autogen._prose(trait.help) in page, (cls, trait.name)  # as Markdown: `<` escaped


def test_the_rest_reference_lists_every_path_method_parameter_and_status():
    from jupyter_nbvalidation.service.openapi import openapi_document

    autogen = _autogen()
    page = autogen.rest_page()
    document = openapi_document("/")
    sections = re.split(r"^## ", page, flags=re.M)
    for path, item in document["paths"].items():
        for method in (m for m in item if m != "parameters"):
            section = next((s for s in sections if s.startswith(f"`{method.upper()} {path}`")), None)
            assert section is not None, (method, path)
            for parameter in [*item.get("parameters", []), *item[method].get("parameters", [])]:
                assert f"| `{parameter['name']}` | {parameter['in']} |" in section, (method, path, parameter)
            for status in item[method]["responses"]:
                assert f"\n| {status} |" in section, (method, path, status)
    for schema in document["components"]["schemas"]:
        assert f"\n### {schema}\n" in page, schema


def test_the_cli_reference_lists_every_subcommand_and_option():
    from jupyter_nbvalidation.cli.main import parser

    autogen = _autogen()
    page = autogen.cli_page()
    sections = dict(re.findall(r"^## `([\w-]+)`\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    subcommands = autogen.subcommands(parser())
    assert len(subcommands) >= 10 and set(sections) == set(subcommands)
    for name, (sub, _help) in subcommands.items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            positional = action.metavar if isinstance(action.metavar, str) else action.dest
            for option in action.option_strings or [positional]:
                assert re.search(rf"^- `[^\n]*{re.escape(option)}\b", sections[name], re.M), (name, option)


def test_the_project_settings_reference_lists_every_key_the_file_takes():
    """The keys of [tool.nbvalidation] are the spec's fields minus notebook (spec/project.py): the
    generated page lists each, and nothing else."""
    from jupyter_nbvalidation.core.spec_table import leaf_paths

    page = _autogen().settings_page()
    keys = re.findall(r"^\| `([\w.]+)` \|", page, re.M)
    assert sorted(keys) == sorted(p for p in leaf_paths() if not p.startswith("notebook.")), keys
    assert "(../project-settings.md)" in page
