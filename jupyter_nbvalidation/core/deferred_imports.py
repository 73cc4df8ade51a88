"""Third-party imports that cost seconds for a check this package never makes, deferred to
their first use.

jsonschema, which nbformat imports (so every CLI, runner and fork server of this package
does), binds ``rfc3987_syntax.is_valid_syntax`` when it is imported and that package is
installed (jupyter-events' ``jsonschema[format-nongpl]`` installs it with every Jupyter
server). Importing rfc3987-syntax 1.1 builds an Earley parser of RFC 3987's grammar: 1.2 s
of CPU in each such process, for the "iri" formats no notebook schema asks for.
:func:`defer_rfc3987_syntax` puts a stand-in under that name: its ``is_valid_syntax`` (and
any other name read from it) imports the real package the first time it is used and hands
the call over, so every check gives the answer it gave before, and only a process that makes
one pays for the parser. A leaf: it imports nothing of this package."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

RFC3987_SYNTAX = "rfc3987_syntax"
_lock = threading.Lock()


def defer_rfc3987_syntax() -> None:
    """The stand-in, unless the package is already imported or not installed."""
    if RFC3987_SYNTAX in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(RFC3987_SYNTAX)
    except (ImportError, ValueError):
        return
    if spec is None or spec.submodule_search_locations is None:
        return
    stand_in = types.ModuleType(RFC3987_SYNTAX, "Stand-in for rfc3987_syntax until first use "
                                                "(jupyter_nbvalidation.core.deferred_imports).")
    stand_in.__spec__ = spec
    stand_in.__file__ = spec.origin
    stand_in.__path__ = list(spec.submodule_search_locations)  # its submodules import as before
    stand_in.__package__ = RFC3987_SYNTAX

    def real() -> types.ModuleType:
        with _lock:
            module = sys.modules.get(RFC3987_SYNTAX)
            if module is not None and module is not stand_in:
                return module
            del sys.modules[RFC3987_SYNTAX]
            try:
                return importlib.import_module(RFC3987_SYNTAX)
            except BaseException:
                sys.modules[RFC3987_SYNTAX] = stand_in
                raise

    def is_valid_syntax(*args: Any, **kwargs: Any) -> Any:
        return real().is_valid_syntax(*args, **kwargs)

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's own (PEP 562)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[RFC3987_SYNTAX] = stand_in
