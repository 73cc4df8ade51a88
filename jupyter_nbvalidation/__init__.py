"""jupyter-nbvalidation: does this notebook run, top to bottom, in a clean
environment built from its declared dependencies — and does it still produce
its golden outputs?"""

from typing import Any

from jupyter_nbvalidation._version import __version__
from jupyter_nbvalidation.core.deferred_imports import defer_rfc3987_syntax

# before anything of this package imports nbformat (so jsonschema): 1.2 s of CPU per process
defer_rfc3987_syntax()


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from jupyter_nbvalidation.app import NBValidation  # deferred: start-up time

    return [{"module": "jupyter_nbvalidation", "app": NBValidation}]


def _jupyter_labextension_paths() -> list[dict[str, Any]]:
    return [{"src": "labextension", "dest": "jupyter-nbvalidation"}]


def load_ipython_extension(ipython: Any) -> None:  # %load_ext jupyter_nbvalidation
    from jupyter_nbvalidation.magic import load_ipython_extension as load  # deferred: start-up time

    load(ipython)


__all__ = ["__version__"]
