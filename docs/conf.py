"""Sphinx configuration of the docs site: MyST Markdown pages, the pydata theme (as jupyter_server
and JupyterLab have), and three reference pages generated at build time by docs/autogen.py (the
configuration from the traitlets, the REST API from the OpenAPI document, the CLI from its parser).

Build: `sphinx-build -W -b html docs docs/_build/html` (a warning fails it); install with `pip install .[docs]`."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import autogen  # noqa: E402  (docs/autogen.py, found through the path above)

from jupyter_nbvalidation import __version__  # noqa: E402

autogen.write_all(HERE / "reference")

project = "jupyter-nbvalidation"
author = "the jupyter-nbvalidation contributors"
copyright = "jupyter-nbvalidation contributors"  # noqa: A001
release = version = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    # notes kept in the repository, not pages of the site
    "issue20-reproductions.md",
    "issue20-reproductions",
]
myst_enable_extensions = ["colon_fence", "deflist"]
# `[Limits](job-spec.md#limits)`: every heading down to ### gets an anchor links can name
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-nbvalidation"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []
# the pages sit at the top of one toctree, so the theme's section navigation would be empty: the
# left sidebar shows the whole toctree instead
html_sidebars = {"**": ["globaltoc.html"]}
