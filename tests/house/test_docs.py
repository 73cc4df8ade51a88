"""The README stays true: every configurable trait is documented, the two
fresh-machine commands open it, and CI runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


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
    missing = [t for t in _configurables() if f"`{t}`" not in README]
    assert not missing, f"README lacks: {missing}"


def _spec_table_rows() -> set[str]:
    """The field names the README's "spec field" table documents: each row's first column
    names one or more fields (`a` / `b`, `a`, `b`); a name without a dot after `a.b` is its sibling."""
    table = README[README.index("| spec field | meaning |"):]
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
    from jupyter_nbvalidation.core.spec_table import leaf_paths

    documented, fields = _spec_table_rows(), leaf_paths()
    assert not fields - documented, f"the README's spec field table lacks {sorted(fields - documented)}"
    assert not documented - fields, f"the README's spec field table names what is no field: {sorted(documented - fields)}"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [ln for ln in first_block.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2
    assert "jupyter lab" in commands[0] and "pip install ." in commands[0]
    assert commands[1] == "bash tools/setup-and-test.sh"
    assert "tools/setup-and-test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_module_maps_name_modules_that_exist():
    """docs/architecture.md and the README's module map name real files."""
    pkg = ROOT / "jupyter_nbvalidation"
    development = README[README.index("## Development"):]
    development = development[:development.find("\n## ", 3)] if "\n## " in development[3:] else development
    for doc in (development, (ROOT / "docs" / "architecture.md").read_text()):
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
