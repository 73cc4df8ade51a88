"""Which package changes turned a notebook red (issue 22, ``jupyter nbvalidation bisect``).

Pure logic, no I/O: the pinned requirement lines of a configuration "the last success's
environment with some of the changed distributions moved to the failing job's versions"
(from the two jobs' environment records, environment_record.py), and a ddmin-style
search (Zeller's delta debugging) for a 1-minimal failing subset of the changes. The
search is given an *oracle* (the caller's: one real validation job per call) that
answers ``FAIL``, ``PASS`` or ``UNRESOLVED`` (the configuration could not be built: uv
found no solution, so the changes depend on each other). It stops after ``max_steps``
calls and reports what it knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from jupyter_nbvalidation.core.redaction import MASK
from jupyter_nbvalidation.verdict.environment_record import normalize

FAIL, PASS, UNRESOLVED = "fail", "pass", "unresolved"


@dataclass(frozen=True)
class Change:
    """One distribution that differs between the last success (``old``) and the failure (``new``)."""

    name: str  # normalized
    display: str  # as the record spells it
    old: Mapping[str, Any] | None  # the last success's distribution entry (None: added since)
    new: Mapping[str, Any] | None  # the failing job's (None: removed since)

    def describe(self) -> str:
        if self.old is None and self.new is not None:
            return f"+{self.display} {self.new.get('version', '')}"
        if self.new is None and self.old is not None:
            return f"-{self.display} {self.old.get('version', '')}"
        assert self.old is not None and self.new is not None
        a, b = self.old.get("version", ""), self.new.get("version", "")
        return f"{self.display} {a} → {b}" if a != b else f"{self.display} {a} (its source changed)"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.display, "from": None if self.old is None else self.old.get("version"),
                "to": None if self.new is None else self.new.get("version")}


def _table(record: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {normalize(d["name"]): d for d in record.get("distributions") or [] if d.get("name")}


def changed_distributions(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Every distribution added, removed, or with another version or source, by name."""
    old, new = _table(before), _table(after)
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is not None and b is not None and a.get("version") == b.get("version") \
                and (a.get("source") or {}) == (b.get("source") or {}):
            continue
        out.append(Change(name, str((b or a or {}).get("name", name)), a, b))
    return out


def requirement_line(dist: Mapping[str, Any]) -> tuple[str, str | None]:
    """A distribution as one requirement line, and a note when the line cannot pin it to
    the content it had (a local path is installed as it is now; a masked URL cannot be used)."""
    name, version = str(dist["name"]), str(dist.get("version", ""))
    src = dist.get("source") or {}
    kind = src.get("kind", "index")
    if kind == "local":
        return str(src.get("path", name)), f"{name} comes from a local path: installed as it is now, not as it was"
    if kind == "vcs":
        vcs, url, commit = src.get("vcs", "git"), str(src.get("url", "")), src.get("commit", "")
        line = f"{name} @ {vcs}+{url}" + (f"@{commit}" if commit else "")
        return line, ("its URL's credentials are not kept: the line may not install" if MASK in url else None)
    if kind == "url":
        url = str(src.get("url", ""))
        return f"{name} @ {url}", ("its URL's credentials are not kept: the line may not install" if MASK in url
                                   else None)
    return f"{name}=={version}", None


def option_lines(declared: Iterable[str]) -> list[str]:
    """The option lines of the declared requirements (``--find-links``, ``--index-url``…):
    where the pinned distributions are to be found."""
    return [ln.strip() for ln in declared if ln.strip().startswith("-") and not ln.strip().startswith(("-e", "--editable", "-r", "--requirement", "-c", "--constraint"))]


def pinned_requirements(success: Mapping[str, Any], failure: Mapping[str, Any], moved: Iterable[str],
                        declared: Iterable[str]) -> tuple[list[str], list[str]]:
    """The requirement lines of "the last success's environment with the distributions
    named in ``moved`` as the failing job had them" (added ones added, removed ones left
    out), after the failing job's declared option lines; and the notes on lines that do
    not pin exactly."""
    old, new = _table(success), _table(failure)
    moved_names = {normalize(n) for n in moved}
    chosen: dict[str, Mapping[str, Any]] = {}
    for name in sorted(set(old) | set(new)):
        dist = new.get(name) if name in moved_names else old.get(name)
        if dist is not None:
            chosen[name] = dist
    lines, notes = option_lines(declared), []
    for name in sorted(chosen):
        line, note = requirement_line(chosen[name])
        lines.append(line)
        if note:
            notes.append(note)
    return lines, notes


@dataclass
class Step:
    number: int
    changes: list[str]  # normalized names moved to the failing job's versions
    outcome: str
    detail: Any = None  # the caller's (e.g. the job's name)


@dataclass
class SearchResult:
    culprits: list[str] | None  # normalized names: a failing subset (1-minimal when ``complete``); None: none found
    complete: bool  # the search ended on its own (False: max_steps reached first)
    steps: list[Step] = field(default_factory=list)
    reason: str = ""


class _Budget(Exception):
    pass


def ddmin(changes: Sequence[str], oracle: Callable[[list[str]], tuple[str, Any]], max_steps: int, *,
          known: Mapping[frozenset[str], str] | None = None,
          on_step: Callable[[Step], None] | None = None) -> SearchResult:
    """A 1-minimal subset of ``changes`` whose configuration fails, by delta debugging.

    ``oracle(subset)`` runs one configuration (the old environment with ``subset`` moved)
    and answers ``(FAIL | PASS | UNRESOLVED, detail)``. ``known``: outcomes already known
    (the empty set passing, say); they cost no step. An unresolved configuration is
    neither: the search goes on with other splits. At most ``max_steps`` oracle calls;
    then the smallest failing subset seen so far is returned with ``complete`` False.
    """
    results: dict[frozenset[str], str] = {k: v for k, v in (known or {}).items()}
    steps: list[Step] = []
    order = list(changes)

    def test(subset: Sequence[str]) -> str:
        key = frozenset(subset)
        if key in results:
            return results[key]
        if len(steps) >= max_steps:
            raise _Budget
        outcome, detail = oracle(sorted(key, key=order.index))
        if outcome not in (FAIL, PASS, UNRESOLVED):
            raise ValueError(f"oracle answered {outcome!r}")
        step = Step(len(steps) + 1, sorted(key, key=order.index), outcome, detail)
        steps.append(step)
        results[key] = outcome
        if on_step is not None:
            on_step(step)
        return outcome

    best: list[str] | None = None

    def smallest_failing() -> list[str] | None:
        failing: list[frozenset[str]] = [k for k, v in results.items() if v == FAIL]
        if not failing:
            return None
        failing.sort(key=len)
        return sorted(failing[0], key=order.index)

    if not order:
        return SearchResult(None, True, steps, "no distribution changed")
    try:
        if test(order) != FAIL:
            what = "builds" if results[frozenset(order)] == PASS else "cannot be built"
            return SearchResult(None, True, steps,
                                f"the old environment with every change moved {what} "
                                f"({results[frozenset(order)]}): the package changes alone do not reproduce it")
        current, n = list(order), 2
        while len(current) >= 2:
            size = len(current)
            chunks = [current[i * size // n:(i + 1) * size // n] for i in range(n)]
            chunks = [c for c in chunks if c]
            for chunk in chunks:  # a part fails by itself
                if test(chunk) == FAIL:
                    current, n = chunk, 2
                    break
            else:
                for chunk in chunks if n > 2 else []:  # a complement fails (with two parts: the other part, tested)
                    rest = [c for c in current if c not in chunk]
                    if test(rest) == FAIL:
                        current, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(current):
                        break  # 1-minimal: no single change can be left out
                    n = min(2 * n, len(current))
        best = current
    except _Budget:
        return SearchResult(smallest_failing(), False, steps, f"stopped after {max_steps} validations")
    return SearchResult(best, True, steps, "")
