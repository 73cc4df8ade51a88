"""Write what describes a job spec from the one table, jupyter_nbvalidation/core/spec_table.py:

- the CRD's spec schema, between the GENERATED SPEC markers of
  jupyter_nbvalidation/backends/kubernetes/manifests/crd.yaml (spec_table.json_schema("crd")),
  and the same schema as the schedule CRD's job template, between the GENERATED JOB TEMPLATE
  markers of schedule-crd.yaml beside it;
- the lab's spec types and limits, labextension/src/spec.generated.ts;
- the spec's TypedDicts, between the GENERATED TYPEDDICTS markers of spec_table.py
  itself (documents.py re-exports them).

tests/test_spec_schemas.py fails when one of them is not current.

    python tools/gen_spec.py          # rewrite the files
    python tools/gen_spec.py --check  # exit 1 if one is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jupyter_nbvalidation.core.spec_schema as S  # noqa: E402
import jupyter_nbvalidation.core.spec_table as T  # noqa: E402

CRD = ROOT / "jupyter_nbvalidation" / "backends" / "kubernetes" / "manifests" / "crd.yaml"
SCHEDULE_CRD = CRD.with_name("schedule-crd.yaml")
TS = ROOT / "labextension" / "src" / "spec.generated.ts"
TABLE = ROOT / "jupyter_nbvalidation" / "core" / "spec_table.py"

CRD_BEGIN = "# BEGIN GENERATED SPEC"
CRD_END = "# END GENERATED SPEC"
TEMPLATE_BEGIN = "# BEGIN GENERATED JOB TEMPLATE"
TEMPLATE_END = "# END GENERATED JOB TEMPLATE"
PY_BEGIN = "# BEGIN GENERATED TYPEDDICTS"
PY_END = "# END GENERATED TYPEDDICTS"


def _objects(obj: T.Obj = T.SPEC) -> list[T.Obj]:
    """Every object of the table, innermost first, one per type name."""
    out: list[T.Obj] = []
    for sub in obj.fields.values():
        if isinstance(sub, T.Obj):
            out += _objects(sub)
    out.append(obj)
    seen: dict[str, T.Obj] = {}
    for o in out:
        if o.typename in seen:
            assert list(seen[o.typename].fields) == list(o.fields), f"two shapes named {o.typename}"
        else:
            seen[o.typename] = o
    return list(seen.values())


def _replace_between(text: str, begin: str, end: str, body: str, path: Path) -> str:
    m = re.search(rf"^([ \t]*){re.escape(begin)}[^\n]*\n(.*?)^[ \t]*{re.escape(end)}[^\n]*$", text, re.M | re.S)
    if not m:
        raise SystemExit(f"{path.relative_to(ROOT)}: no {begin} ... {end} markers")
    return text[:m.start(2)] + body + text[m.end(2):]


# --- the TypedDicts ------------------------------------------------------------------------------------


def render_typeddicts() -> str:
    import textwrap

    lines: list[str] = []
    for obj in _objects():
        hint = {k: (sub.typename if isinstance(sub, T.Obj) else T.PY_TYPES[sub.kind]) for k, sub in obj.fields.items()}
        optional = [k for k in obj.fields if k not in obj.required]
        bases = "TypedDict"
        if obj.required and optional:
            lines += ["", "", f"class _{obj.typename}Required(TypedDict):"]
            lines += [f"    {k}: {hint[k]}" for k in obj.required]
            bases = f"_{obj.typename}Required"
        lines += ["", "", f"class {obj.typename}({bases}{', total=False' if optional else ''}):"]
        doc = textwrap.wrap(obj.description, 110)
        lines += [f'    """{doc[0]}'] + [f"    {d}" for d in doc[1:]]
        lines[-1] += '"""'
        lines.append("")
        for k in optional or obj.required:
            sub = obj.fields[k]
            note = f"  # {' | '.join(sub.limit)}" if isinstance(sub, T.Field) and sub.kind == "enum" else ""
            lines.append(f"    {k}: {hint[k]}{note}")
    return "\n".join(lines[2:]) + "\n"


def render_table(current: str) -> str:
    return _replace_between(current, PY_BEGIN, PY_END, render_typeddicts(), TABLE)


# --- the CRD ---------------------------------------------------------------------------------------------


def render_crd(current: str, path: Path | None = None, begin: str = CRD_BEGIN, end: str = CRD_END) -> str:
    """The job spec's schema as ``spec:`` between ``begin`` and ``end`` (the job CRD's spec; the
    schedule CRD's ``spec.jobTemplate.spec``: the same schema, so strict field validation refuses
    the same unknown fields)."""
    import yaml

    path = path or CRD
    m = re.search(rf"^([ \t]*){re.escape(begin)}", current, re.M)
    if not m:
        raise SystemExit(f"{path.relative_to(ROOT)}: no {begin} marker")
    indent = m.group(1)
    text = yaml.safe_dump({"spec": S.json_schema("crd")}, sort_keys=False, width=120, default_flow_style=False,
                          allow_unicode=True)
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in text.splitlines())
    return _replace_between(current, begin, end, body, path)


# --- the lab ----------------------------------------------------------------------------------------------


def _q(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ts_type(f: T.Field) -> str:
    if f.kind == "enum":
        return " | ".join(_q(v) for v in f.limit)
    return {
        "str": "string", "bool": "boolean", "duration": "string | number", "number": "number", "bytes": "number",
        "strlist": "string[]", "globlist": "string[]", "regexlist": "string[]", "outputlist": "string[]",
        "envlist": "IEnvVar[]", "quantities": "Record<string, string | number>", "labels": "Record<string, string>",
        "tolerations": "IToleration[]", "sanitizers": "ISanitizer[]", "parameters": "Record<string, unknown>",
    }[f.kind]


def _const(name: str, value: str) -> str:
    """``export const NAME = value;`` as prettier writes it (printWidth 100)."""
    line = f"export const {name} = {value};"
    return line if len(line) <= 100 else f"export const {name} =\n  {value};"


def _doc(text: str, indent: str = "") -> str:
    return f"{indent}/** {text.replace('*/', '* /')} */"


def render_ts() -> str:
    lines = [
        "// Generated by tools/gen_spec.py from jupyter_nbvalidation/core/spec_table.py.",
        "// Do not edit: run `python tools/gen_spec.py` after changing the table.",
        "",
        "export interface IEnvVar {",
        "  name: string;",
        "  value?: string;",
        "}",
        "",
        "export interface IToleration {",
        "  key?: string;",
        "  operator?: " + " | ".join(_q(v) for v in T.TOLERATION_OPERATORS) + ";",
        "  value?: string;",
        "  effect?: " + " | ".join(_q(v) for v in T.TAINT_EFFECTS) + ";",
        "  tolerationSeconds?: number;",
        "}",
        "",
        "export interface ISanitizer {",
        "  regex: string;",
        "  replace: string;",
        "  section?: string;",
        "}",
    ]
    for obj in _objects():
        lines += ["", _doc(obj.description), f"export interface I{obj.typename} {{"]
        for key, sub in obj.fields.items():
            opt = "" if key in obj.required else "?"
            typ = f"I{sub.typename}" if isinstance(sub, T.Obj) else _ts_type(sub)
            lines += [_doc(sub.description, "  "), f"  {key}{opt}: {typ};"]
        lines.append("}")
    leaves = sorted(T.leaf_paths())
    limits = {
        "MAX_DURATION_SECONDS": T.MAX_DURATION_SECONDS, "MAX_STRING_CHARS": T.MAX_STRING_CHARS,
        "MAX_TOLERANCE": T.MAX_TOLERANCE, "MAX_PATTERNS": T.MAX_PATTERNS, "MAX_PATTERN_CHARS": T.MAX_PATTERN_CHARS,
        "MAX_PARAMETERS": T.MAX_PARAMETERS, "MAX_PARAMETER_NAME_CHARS": T.MAX_PARAMETER_NAME_CHARS,
        "MAX_PARAMETERS_BYTES": T.MAX_PARAMETERS_BYTES, "MAX_OUTPUT_BYTES": T.MAX_OUTPUT_BYTES,
    }
    patterns = {"DURATION_PATTERN": T.DURATION_PATTERN, "OUTPUT_SELECTOR_PATTERN": T.OUTPUT_SELECTOR_PATTERN,
                "PARAMETER_NAME_PATTERN": T.PARAMETER_NAME_PATTERN}
    lines += [
        "",
        "/** Every leaf field of a spec, as the server's 400 names it. */",
        "export const SPEC_FIELDS = [",
        *(f"  {_q(p)}," for p in leaves),
        "] as const;",
        "",
        "export type SpecField = (typeof SPEC_FIELDS)[number];",
        "",
        "/** The server's limits (spec_table.py). */",
        *(f"export const {k} = {int(v) if v == int(v) else v};" for k, v in limits.items()),
        "",
        "/** The server's patterns (spec_table.py), as regular expression sources. */",
        *(_const(k, _q(v)) for k, v in patterns.items()),
        "",
    ]
    text = "\n".join(lines)
    return text.replace(",\n]", "\n]")


# --- main ---------------------------------------------------------------------------------------------------


def outputs() -> dict[Path, str]:
    """Each generated file as it should be now."""
    return {TABLE: render_table(TABLE.read_text()), CRD: render_crd(CRD.read_text()), TS: render_ts(),
            SCHEDULE_CRD: render_crd(SCHEDULE_CRD.read_text(), SCHEDULE_CRD, TEMPLATE_BEGIN, TEMPLATE_END)}


def stale() -> list[str]:
    return [str(p.relative_to(ROOT)) for p, text in outputs().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for name in bad:
            print(f"{name} is stale: run python tools/gen_spec.py", file=sys.stderr)
        return 1 if bad else 0
    for path, text in outputs().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
