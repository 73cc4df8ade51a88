"""What a finished job says about its notebook, for the batch summary, JUnit XML and the HTML report."""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.core.model import CellStatus, Phase
from jupyter_nbvalidation.runner.text import cell_label  # the shared human cell numbering

__all__ = ["Failure", "cell_label", "failure_of"]


class Failure:
    """Why a job failed: ``headline`` ("cell 3: KeyError: 'price'"), the 0-based
    ``cell_index`` (or None), ``error`` (the cell's error output, traceback
    included) and ``diffs`` (the golden comparison's differing cells)."""

    def __init__(self, headline: str, cell_index: int | None, error: str, diffs: list[dict[str, Any]],
                 reason: str):
        self.headline = headline
        self.cell_index = cell_index
        self.error = error
        self.diffs = diffs
        self.reason = reason

    @property
    def cell(self) -> str:
        return cell_label(self.cell_index) if self.cell_index is not None else ""

    def text(self) -> str:
        """The error, its traceback and the golden differences, as plain text."""
        parts = []
        if self.error:
            parts.append(self.error.rstrip())
        for d in self.diffs:
            idx = d.get("cellIndex")
            where = cell_label(idx) if isinstance(idx, int) else "notebook"
            parts.append(f"{where}: {d.get('diffType', 'differs')}\n{(d.get('diff') or '').rstrip()}".rstrip())
        return "\n\n".join(parts)


def failure_of(job: dict[str, Any]) -> Failure | None:
    """The failure of a Failed job (None when it succeeded or is not finished)."""
    st = job.get("status") or {}
    if st.get("phase") != Phase.FAILED:
        return None
    reason = st.get("reason") or Phase.FAILED
    idx = st.get("failedCellIndex")
    error = ""
    headline = ""
    if isinstance(idx, int):
        for r in st.get("results") or []:
            if r.get("cellIndex") == idx and (r.get("errorName") or r.get("status") == CellStatus.FAILURE):
                name, message = r.get("errorName") or "", r.get("errorMessage") or ""
                headline = f"{cell_label(idx)}: {name}: {message}".rstrip(": ") if name else \
                    f"{cell_label(idx)}: {message or st.get('message', '')}".rstrip(": ")
                error = r.get("output") or f"{name}: {message}".strip(": ")
                break
    cr = st.get("comparisonResult") or {}
    diffs = list(cr.get("diffs") or []) if cr.get("result") == "failed" else []
    if not headline and diffs:
        first = diffs[0].get("cellIndex")
        where = cell_label(first) if isinstance(first, int) else "notebook"
        if isinstance(first, int) and idx is None:
            idx = first
        headline = (f"{where}: outputs differ from the golden copy ({cr.get('mismatchedCells')} of "
                    f"{cr.get('totalCells')} cells differ)")
    if not headline:
        headline = f"{cell_label(idx)}: {st.get('message', '')}" if isinstance(idx, int) else \
            (st.get("message") or reason)
    if not error and not diffs:
        error = st.get("message") or ""
    return Failure(headline.strip(), idx if isinstance(idx, int) else None, error, diffs, reason)
