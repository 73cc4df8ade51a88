"""Parameters, as papermill injects them (standard library only).

A job's ``spec.parameters`` (``{name: JSON value}``) become one new code cell,
tagged ``injected-parameters``, placed right after the first cell tagged
``parameters`` (at the top of the notebook when there is none). Its source has
papermill's Python form: a ``# Parameters`` comment, then one ``name = value``
line per parameter, JSON values written as Python literals (``true`` /
``false`` / ``null`` as ``True`` / ``False`` / ``None``, strings in double
quotes, lists and objects as lists and dicts).

Numbering (README, "Parameters"): the injected cell is not one of the user's
cells. The runner executes the submitted notebook's cells and runs the
injected cell between them; every cell index it reports (``failedCellIndex``,
``results[].cellIndex``, ``diffs[].cellIndex``, progress) is an index into the
*submitted* notebook, as JupyterLab shows it. Only the executed notebook holds
the injected cell (so cells after it sit one place further there). Cells of
the submitted notebook already tagged ``injected-parameters`` (a notebook
papermill wrote) are replaced as papermill replaces them: not run, not
compared, and left out of the executed notebook's comparison.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Mapping

from jupyter_nbvalidation.verdict.compare import INJECTED_PARAMETERS_TAG
from jupyter_nbvalidation.verdict.markers import cell_tags

PARAMETERS_TAG = "parameters"
REPLACED_NOTE = "an earlier injected-parameters cell: replaced by this job's parameters"


def python_literal(value: Any) -> str:
    """A JSON value as a Python literal (papermill's PythonTranslator rules)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    if isinstance(value, str):
        # a JSON string literal is a valid Python one (non-ASCII kept as it is)
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{python_literal(str(k))}: {python_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def parameters_source(parameters: Mapping[str, Any]) -> str:
    """The source of the injected cell, as papermill writes it."""
    lines = ["# Parameters"] + [f"{name} = {python_literal(value)}" for name, value in parameters.items()]
    return "\n".join(lines) + "\n"


def injected_cell(parameters: Mapping[str, Any]) -> Any:
    """A new nbformat v4 code cell holding the parameters, tagged ``injected-parameters``."""
    import nbformat  # deferred: start-up time (importing nbformat imports jsonschema)

    cell = nbformat.v4.new_code_cell(source=parameters_source(parameters))  # type: ignore[no-untyped-call]
    cell.metadata["tags"] = [INJECTED_PARAMETERS_TAG]
    return cell


def injection_index(nb: Any) -> int:
    """Where the injected cell goes, as an index into the submitted notebook's
    cells: after the first cell tagged ``parameters``, else 0 (the top)."""
    for index, cell in enumerate(nb.get("cells") or []):
        if PARAMETERS_TAG in cell_tags(cell) and INJECTED_PARAMETERS_TAG not in cell_tags(cell):
            return index + 1
    return 0


def replaced_cells(nb: Any) -> list[int]:
    """Cells already tagged ``injected-parameters`` (replaced by the new one)."""
    return [i for i, cell in enumerate(nb.get("cells") or []) if INJECTED_PARAMETERS_TAG in cell_tags(cell)]


def with_injected(nb: Any, cell: Any, index: int) -> Any:
    """A shallow copy of ``nb`` with ``cell`` inserted before ``index`` (the executed notebook)."""
    out = copy.copy(nb)
    cells = list(nb.cells)
    cells.insert(index, cell)
    out["cells"] = cells
    return out
