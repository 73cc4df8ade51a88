"""What a verdict says about the environment it ran in (issue 21, "Every verdict
says its environment"): ``status.environment``, the short sentence the engine
writes when it plans the build and keeps on the final status, and the hint a
``ModuleNotFoundError`` gets when the module was not declared.

Both only show what the plan already knows (``ValidationPlan.detected``,
``Requirements.origin``): where the requirements are looked for is
requirements.py's business, not this module's.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from jupyter_nbvalidation.spec.plan import ValidationPlan

#: the file a notebook's dependencies go in when nothing else is declared
BESIDE = "requirements.txt beside the notebook"

_NO_MODULE = re.compile(r"No module named (['\"])([^'\"]+)\1")
_PROJECT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def environment_sentence(plan: ValidationPlan, unbuilt: str) -> str:
    """``status.environment``: "2 requirements from requirements.txt beside the
    notebook"; with the build disabled, "build disabled: <unbuilt>" (the
    backend's words for where such a job runs), saying what was declared and not
    installed."""
    if plan.build:
        return plan.detected
    if plan.requirements.count:
        return f"build disabled: {unbuilt} ({plan.detected}, not installed)"
    return f"build disabled: {unbuilt}"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def declared_names(plan: ValidationPlan) -> set[str]:
    """The project names the requirements declare, canonical (``scikit-learn`` ->
    ``scikit_learn``); options, URLs and paths name none."""
    names = set()
    for line in plan.requirements.display_lines:
        text = line.strip()
        if not text or text.startswith(("-", ".", "/", "~")) or "://" in text.split(" @ ")[0]:
            continue
        m = _PROJECT.match(text)
        if m:
            names.add(_canonical(m.group(1)))
    return names


def _failed_error(result: Mapping[str, Any]) -> tuple[str | None, str | None]:
    failed = result.get("failedCellIndex")
    for entry in result.get("results") or []:
        if entry.get("cellIndex") == failed and failed is not None:
            return entry.get("errorName"), entry.get("errorMessage")
    error = result.get("error")
    if isinstance(error, Mapping):  # a termination summary
        return error.get("name"), error.get("message")
    return None, None


def missing_module_hint(plan: ValidationPlan | None, result: Mapping[str, Any], unbuilt: str) -> str | None:
    """One sentence when the failing cell raised ``ModuleNotFoundError`` (or
    ``ImportError: No module named X``) for a module the job did not declare:
    where the environment came from and where to declare it. None otherwise
    (the module was declared: the failure is not a missing declaration)."""
    if plan is None:
        return None
    name, message = _failed_error(result)
    if name not in ("ModuleNotFoundError", "ImportError") or not isinstance(message, str):
        return None
    m = _NO_MODULE.search(message)
    if m is None:
        return None
    module = m.group(2)
    top = module.split(".")[0]
    if not plan.build:
        return (f"No module named {module!r}: the build is disabled, so the notebook ran in {unbuilt}; "
                f"install {top} there, or enable the build and declare {top} in {BESIDE}.")
    reqs = plan.requirements
    if reqs.count == 0:
        if reqs.origin and not re.match(r"^no (requirements|dependencies) declared", reqs.origin) and \
                reqs.origin != "spec.podConfig.buildConfig.requirements":  # a file that declares nothing
            return (f"No module named {module!r}: the environment was built from {reqs.origin}, which declares "
                    f"nothing to install; declare {top} there.")
        origin = re.sub(r"^no (requirements|dependencies) declared:?\s*", "", reqs.origin or "")
        return (f"No module named {module!r}: the environment was built with no requirements declared"
                + (f" ({origin})" if origin else "") + f"; declare {top} in {BESIDE}.")
    if _canonical(top) in declared_names(plan):
        return None
    elsewhere = "" if reqs.origin.startswith(BESIDE) else f" (or in {BESIDE})"
    return (f"No module named {module!r}: the environment was built from {reqs.origin}; "
            f"declare {top} there{elsewhere}.")
