"""One spec field from the request to the kernel (docs/architecture.md, "One field from the
request to the kernel"): a runner option is declared once in the spec table and flows
generically, so few files of the package handle `cellTimeout` by name. This test counts
the files that name it (any spelling: cellTimeout, cell_timeout, cell-timeout,
DEFAULT_CELL_TIMEOUT; not nbclient's CellTimeoutError) and fails above the limit, listing
them; and it holds the docs' list of those files to the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "jupyter_nbvalidation"
NAMED = re.compile(r"cell[_-]?timeout(?!error)", re.IGNORECASE)
LIMIT = 6
# written from the spec table by tools/gen_spec.py, never by hand (tests/core/test_spec_schemas.py)
GENERATED = {"backends/kubernetes/manifests/crd.yaml", "backends/kubernetes/manifests/schedule-crd.yaml"}
SOURCES = {".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".txt"}
SECTION = "## One field from the request to the kernel"


def names_the_field(text: str) -> bool:
    return NAMED.search(text) is not None


def files_naming_the_field() -> list[str]:
    """The package's hand-written source files that name the field (paths in the package)."""
    found = []
    for path in sorted(PKG.rglob("*")):
        rel = path.relative_to(PKG).as_posix()
        if (not path.is_file() or path.suffix not in SOURCES or rel in GENERATED
                or "__pycache__" in path.parts or "labextension" in path.parts):
            continue
        if names_the_field(path.read_text(encoding="utf-8", errors="replace")):
            found.append(rel)
    return found


def test_the_finder_sees_every_spelling_and_not_nbclients_error() -> None:
    for text in ('spec["cellTimeout"]', "options.cell_timeout", '"--cell-timeout"', "DEFAULT_CELL_TIMEOUT = 600",
                 "default_cell_timeout = Int(600)"):
        assert names_the_field(text), text
    for text in ("except CellTimeoutError:", "from nbclient.exceptions import CellTimeoutError", "timeout",
                 "ResultReason.CELL_TIMED_OUT"):
        assert not names_the_field(text), text


def test_at_most_six_files_of_the_package_handle_the_cell_timeout() -> None:
    files = files_naming_the_field()
    assert "core/spec_table.py" in files  # the finder reads the package: the field's one declaration is there
    assert len(files) <= LIMIT, (f"{len(files)} files of the package name cellTimeout (at most {LIMIT}: declare a "
                                 f"runner option in core/spec_table.py and let it flow generically): "
                                 + ", ".join(files))


def test_the_architecture_page_lists_those_files() -> None:
    """The docs' section lists the files the field passes through, by name: exactly the files
    that name it (and the generated ones)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert SECTION in page
    section = page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`jupyter_nbvalidation/([^`]+)`", section))
    assert listed == set(files_naming_the_field()) | GENERATED, listed ^ (set(files_naming_the_field()) | GENERATED)
