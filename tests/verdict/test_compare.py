"""Golden comparison rules (jupyter_nbvalidation.verdict.compare) and cell markers."""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import jupyter_nbvalidation.verdict.compare as compare
import jupyter_nbvalidation.verdict.flatten as flatten
from jupyter_nbvalidation.verdict.markers import cell_markers, notebook_execution_settings


def stream(text, name="stdout"):
    return new_output("stream", name=name, text=text)


def result(data, count=1):
    return new_output("execute_result", data=data, execution_count=count)


def error(ename, evalue, traceback=("tb",)):
    return new_output("error", ename=ename, evalue=evalue, traceback=list(traceback))


def executed(source, outputs, count=1, **kw):
    return new_code_cell(source, execution_count=count, outputs=outputs, **kw)


def nb(*cells):
    return new_notebook(cells=list(cells))


# --- terminal controls and stream coalescing ---------------------------------------


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain\n", "plain\n"),
        ("50%\r100%\n", "100%\n"),
        ("hello\rab", "abllo"),  # a terminal overwrites, it does not erase
        ("ab\bc", "ac"),
        ("a\b\b\bb", "b"),  # never left of column 0
        ("1/3\r2/3\r3/3\ndone\n", "3/3\ndone\n"),
        ("line\r\nnext", "line\nnext"),
        ("done\r", "done"),
    ],
)
def test_resolve_terminal_controls(raw, shown):
    assert flatten.resolve_terminal_controls(raw) == shown


def test_consecutive_streams_are_merged_and_carriage_returns_resolved():
    """What the comparison sees of a cell's streams (the flattening): a progress bar's
    pieces are one line, the way the notebook shows it."""
    outputs = [stream("progress 10%"), stream("\rprogress 100%\n"), stream("warn\n", "stderr"), stream("end\n")]
    golden = [stream("progress 100%\n"), stream("warn\n", "stderr"), stream("end\n")]
    assert compare.compare_cell_outputs(golden, outputs, strategy="exact").equal
    assert not compare.compare_cell_outputs([stream("progress 10%\n"), stream("warn\n", "stderr"),
                                             stream("end\n")], outputs, strategy="exact").equal
    assert outputs[0]["text"] == "progress 10%"  # input untouched


def test_streams_split_differently_compare_equal():
    golden = [stream("a\nb\n")]
    actual = [stream("a\n"), stream("b\n")]
    assert compare.compare_cell_outputs(golden, actual, strategy="exact").equal


def test_stream_interleaving_with_stderr_does_not_matter():
    golden = [stream("a\n"), stream("w\n", "stderr"), stream("b\n")]
    actual = [stream("a\nb\n"), stream("w\n", "stderr")]
    assert compare.compare_cell_outputs(golden, actual, strategy="exact").equal


def test_progress_bar_with_carriage_returns_matches_final_text():
    golden = [stream("[####] 100%\n")]
    actual = [stream("[#   ] 25%"), stream("\r[##  ] 50%"), stream("\r[####] 100%\n")]
    assert compare.compare_cell_outputs(golden, actual, strategy="exact").equal


# --- flattening ---------------------------------------------------------------------


def test_flatten_ignores_metadata_counts_tracebacks_widgets_and_images():
    outputs = [
        new_output(
            "display_data",
            data={
                "text/plain": "fig",
                "image/png": "iVBORw0KGgo=",
                "image/jpeg": "/9j/",
                "image/svg+xml": "<svg/>",
                "application/vnd.jupyter.widget-view+json": {"model_id": "abc"},
            },
            metadata={"image/png": {"width": 10}},
        ),
        result({"text/plain": "2"}, count=7),
        error("ValueError", "bad", ["line 1", "line 2"]),
    ]
    flat = flatten.flatten_outputs(outputs)
    assert flat == {"text/plain": ["fig", "2"], "error": ["ValueError: bad"]}
    with_images = flatten.flatten_outputs(outputs, compare_images=True)
    assert set(with_images) == {"text/plain", "image/png", "image/jpeg", "image/svg+xml", "error"}


def test_execution_count_and_traceback_differences_are_ignored():
    golden = [result({"text/plain": "1"}, count=3), error("E", "v", ["old traceback"])]
    actual = [result({"text/plain": "1"}, count=9), error("E", "v", ["new", "traceback"])]
    assert compare.compare_cell_outputs(golden, actual, strategy="exact").equal


def test_missing_and_unexpected_keys_differ():
    golden = [result({"text/plain": "x", "text/html": "<b>x</b>"})]
    actual = [result({"text/plain": "x"})]
    assert not compare.compare_cell_outputs(golden, actual).equal
    assert not compare.compare_cell_outputs(actual, golden).equal


def test_value_count_per_key_must_match():
    golden = [result({"text/plain": "x"})]
    actual = [result({"text/plain": "x"}), new_output("display_data", data={"text/plain": "x"})]
    assert not compare.compare_cell_outputs(golden, actual).equal


def test_json_mimetype_values_are_compared_as_sorted_json():
    golden = [result({"application/json": {"b": 1, "a": [1, 2]}})]
    actual = [result({"application/json": {"a": [1, 2], "b": 1}})]
    assert compare.compare_cell_outputs(golden, actual, strategy="exact").equal


# --- normalized mode: sanitising ------------------------------------------------------------


def test_memory_addresses_are_sanitised_in_normalized_mode_only():
    golden = [result({"text/plain": "<__main__.Thing at 0x7f3a2c1b0e80>"})]
    actual = [result({"text/plain": "<__main__.Thing at 0x55d0c0ffee00>"})]
    assert compare.compare_cell_outputs(golden, actual, strategy="normalized").equal
    assert not compare.compare_cell_outputs(golden, actual, strategy="exact").equal


def test_function_repr_addresses_are_sanitised():
    a = "<function f at 0x7f0000000001>"
    b = "<function f at 0x7f00000000ff>"
    assert compare.texts_equal(a, b)
    assert not compare.texts_equal("<function f at 0x1>", "<function g at 0x1>")


@pytest.mark.parametrize("text", [
    "<generator object <genexpr> at 0x{}>",
    "<function <lambda> at 0x{}>",
    "<function outer.<locals>.inner at 0x{}>",
    "[<function <lambda> at 0x{}>, <generator object f.<locals>.<genexpr> at 0x{}>]",
])
def test_nested_repr_addresses_are_sanitised(text):
    """Issue 21: the masker stopped at the inner "<", so --golden-self failed on these."""
    a, b = text.replace("{}", "7f3a2c1b0e80"), text.replace("{}", "55d0c0ffee00")
    assert compare.texts_equal(a, b)
    assert not compare.texts_equal(a, a.replace("<lambda>", "<listcomp>").replace("<genexpr>", "<listcomp>")
                                   .replace("inner", "other"))


def test_hex_outside_an_object_repr_is_data():
    assert not compare.texts_equal("value 0xff", "value 0xfe")


@pytest.mark.parametrize(
    "golden, actual",
    [
        ("run at 2021-03-04T05:06:07.123456+00:00 done", "run at 2026-05-09T15:00:01Z done"),
        ("date: 2021-03-04", "date: 2026-12-31"),
        ("elapsed at 12:01:02", "elapsed at 23:59:59.5"),
        ("on 3/4/2021", "on 12/31/2026"),
    ],
)
def test_timestamps_dates_and_times_are_sanitised(golden, actual):
    assert compare.texts_equal(golden, actual)
    assert not compare.texts_equal(golden, actual, strategy="exact")


def test_trailing_whitespace_and_blank_line_runs():
    assert compare.texts_equal("a  \nb\t\n\n\n\nc\n\n", "a\nb\n\nc")
    assert not compare.texts_equal("a\nb", "a\n\nb")  # one blank line is content
    assert not compare.texts_equal("a  \n", "a\n", strategy="exact")


def test_leading_whitespace_is_content():
    assert not compare.texts_equal(" 2    3\nx  + y", " 2   3\nx  + y")


# --- normalized mode: numbers --------------------------------------------------------------


def test_tokenize_alternates_text_and_numbers():
    assert compare.tokenize("x = -1.5e-3, y=2") == [
        (False, "x = "),
        (True, "-1.5e-3"),
        (False, ", y="),
        (True, "2"),
        (False, ""),
    ]
    # digits glued to a word are part of the word; a minus glued to a word is text
    assert compare.tokenize("float64 x-1") == [(False, "float64 x-"), (True, "1"), (False, "")]


def test_tolerance_not_rounding_equal_where_rounding_would_differ():
    # rounded to 4 decimals these are 0.1234 and 0.1235; they are 2e-8 apart
    assert round(0.12344999, 4) != round(0.12345001, 4)
    assert compare.texts_equal("loss 0.12344999", "loss 0.12345001", abs_tol=1e-4)


def test_tolerance_not_rounding_differ_where_rounding_would_agree():
    # both round to 0.1234, but they are 3e-5 apart: more than abs_tol 1e-6
    assert round(0.12341, 4) == round(0.12344, 4)
    assert not compare.texts_equal("0.12341", "0.12344", abs_tol=1e-6)


def test_clearly_different_numbers_differ():
    assert not compare.texts_equal("1.0", "1.1")
    assert not compare.texts_equal("value: 1.0", "value: 1.1", abs_tol=1e-4, rel_tol=0.0)


def test_relative_tolerance_scales_with_the_golden_value():
    assert compare.texts_equal("1000000", "1000050", abs_tol=0, rel_tol=1e-4)
    assert not compare.texts_equal("1000000", "1000200", abs_tol=0, rel_tol=1e-4)
    # |a - b| <= abs_tol + rel_tol * |b|, b being the golden value
    assert compare.numbers_close("1.5", "1.0", abs_tol=0.25, rel_tol=0.25)
    assert not compare.numbers_close("1.51", "1.0", abs_tol=0.25, rel_tol=0.25)


def test_number_formats_and_scientific_notation():
    assert compare.texts_equal("1e-3", "0.001")
    assert compare.texts_equal("2.50", "2.5")
    assert compare.texts_equal("[1.00001, -2.0]", "[1.0, -2.00002]")
    assert not compare.texts_equal("-1.0", "1.0")


def test_big_integers_compared_exactly():
    assert not compare.texts_equal("12345678901234567890", "12345678901234567891", abs_tol=0)
    assert compare.texts_equal("12345678901234567890", "12345678901234567890", abs_tol=0)
    assert not compare.texts_equal("x^{5130922748868}", "x^{5130922748869}")


def test_token_count_mismatch_is_a_mismatch():
    assert not compare.texts_equal("1 2", "1 2 3")
    assert not compare.texts_equal("a b", "a c")


def test_infinities_and_nan_text():
    assert compare.texts_equal("1e999", "1e999")
    assert not compare.texts_equal("1e999", "-1e999")
    assert compare.texts_equal("nan", "nan")


# --- whole notebooks --------------------------------------------------------------------


def golden_notebook():
    return nb(
        new_markdown_cell("title"),
        executed("print('x')", [stream("x\n")], 1),
        executed("0.1 + 0.2", [result({"text/plain": "0.30000000000000004"})], 2),
        new_code_cell("print('never run in the golden copy')"),
    )


def test_identical_notebooks_match_and_unexecuted_golden_cells_are_skipped():
    golden = golden_notebook()
    actual = copy.deepcopy(golden)
    actual.cells[3].outputs = [stream("never run in the golden copy\n")]
    actual.cells[3].execution_count = 3
    res = compare.compare_notebooks(golden, actual)
    assert res == {
        "strategy": "normalized",
        "result": "matched",
        "totalCells": 3,
        "matchedCells": 2,
        "mismatchedCells": 0,
        "skippedCells": 1,
        "tolerance": {"absolute": 1e-4, "relative": 0.0},  # the defaults, shown with every result
        "lax": False,
        "diffs": [],
    }


def test_executed_golden_cell_without_output_is_compared():
    golden = nb(executed("print('test')", [], 1))
    actual = nb(executed("print('test')", [stream("test\n")], 1))
    res = compare.compare_notebooks(golden, actual)
    assert res["result"] == "failed"
    assert res["diffs"][0]["cellIndex"] == 0


def test_mismatch_yields_one_diff_with_unified_diff_text():
    golden = golden_notebook()
    actual = copy.deepcopy(golden)
    actual.cells[1].outputs = [stream("y\n")]
    res = compare.compare_notebooks(golden, actual, strategy="exact")
    assert res["result"] == "failed"
    assert (res["matchedCells"], res["mismatchedCells"], res["skippedCells"]) == (1, 1, 1)
    (diff,) = res["diffs"]
    assert diff["cellIndex"] == 1
    assert diff["cellType"] == "code"
    assert diff["diffType"] == "output_mismatch"
    assert diff["severity"] == "major"
    assert diff["expected"] == "[stream:stdout]\nx\n"
    assert diff["actual"] == "[stream:stdout]\ny\n"
    assert "--- golden cell 2" in diff["diff"]  # cellIndex 1 is what JupyterLab shows as Cell 2
    assert "-x" in diff["diff"].splitlines()
    assert "+y" in diff["diff"].splitlines()


def test_float_noise_matches_in_normalized_mode_but_not_in_exact_mode():
    golden = nb(executed("0.1 + 0.2", [result({"text/plain": "0.3"})]))
    actual = nb(executed("0.1 + 0.2", [result({"text/plain": "0.30000000000000004"})]))
    assert compare.compare_notebooks(golden, actual)["result"] == "matched"
    assert compare.compare_notebooks(golden, actual, strategy="exact")["result"] == "failed"


def test_ignore_output_marker_comment_and_tag():
    golden = nb(
        executed("# NBVAL_IGNORE_OUTPUT\nimport random\nrandom.random()", [result({"text/plain": "0.1"})]),
        executed("random.random()", [result({"text/plain": "0.2"})], metadata={"tags": ["nbval-ignore-output"]}),
    )
    actual = copy.deepcopy(golden)
    actual.cells[0].outputs = [result({"text/plain": "0.9"})]
    actual.cells[1].outputs = [result({"text/plain": "0.8"})]
    res = compare.compare_notebooks(golden, actual)
    assert (res["result"], res["skippedCells"], res["matchedCells"]) == ("matched", 2, 0)


def test_skip_markers_and_cells_not_run_are_not_compared():
    golden = nb(
        executed("# NBVAL_SKIP\n1/0", [stream("old\n")]),
        executed("1", [result({"text/plain": "1"})]),
        executed("2", [result({"text/plain": "2"})]),
    )
    actual = copy.deepcopy(golden)
    for cell in actual.cells:
        cell.outputs = []
    actual.cells[1].outputs = [result({"text/plain": "1"})]
    res = compare.compare_notebooks(golden, actual, skip_cells=[2])
    assert (res["result"], res["matchedCells"], res["skippedCells"]) == ("matched", 1, 2)


def test_raises_exception_cells_compare_ename_and_evalue():
    tags = {"tags": ["raises-exception"]}
    golden = nb(executed("foo()", [error("NameError", "name 'a' is not defined")], metadata=tags))
    same = nb(executed("foo()", [error("NameError", "name 'a' is not defined", ["other tb"])], metadata=tags))
    other = nb(executed("foo()", [error("RuntimeError", "Foo")], metadata=tags))
    assert compare.compare_notebooks(golden, same)["result"] == "matched"
    res = compare.compare_notebooks(golden, other)
    assert res["result"] == "failed"
    assert res["diffs"][0]["diffType"] == "output_mismatch"


def test_new_error_in_actual_is_an_execution_error_diff():
    golden = nb(executed("f()", [stream("ok\n")]))
    actual = nb(executed("f()", [stream("ok\n"), error("ZeroDivisionError", "division by zero")]))
    (diff,) = compare.compare_notebooks(golden, actual)["diffs"]
    assert diff["diffType"] == "execution_error"


def test_cell_count_and_type_mismatches():
    golden = nb(executed("1", [result({"text/plain": "1"})]), executed("2", [result({"text/plain": "2"})]))
    shorter = nb(executed("1", [result({"text/plain": "1"})]))
    res = compare.compare_notebooks(golden, shorter)
    assert [(d["cellIndex"], d["diffType"]) for d in res["diffs"]] == [(1, "missing_cell")]
    res = compare.compare_notebooks(shorter, golden)
    assert [(d["cellIndex"], d["diffType"]) for d in res["diffs"]] == [(1, "extra_cell")]
    typed = nb(executed("1", [result({"text/plain": "1"})]), new_markdown_cell("2"))
    res = compare.compare_notebooks(golden, typed)
    assert [(d["cellIndex"], d["diffType"]) for d in res["diffs"]] == [(1, "missing_cell")]
    assert res["totalCells"] == res["matchedCells"] + res["mismatchedCells"] + res["skippedCells"] == 2


def test_expected_and_actual_are_truncated():
    golden = nb(executed("x", [stream("a" * 10000)]))
    actual = nb(executed("x", [stream("b" * 10000)]))
    (diff,) = compare.compare_notebooks(golden, actual)["diffs"]
    assert len(diff["expected"]) <= compare.TEXT_LIMIT
    assert len(diff["actual"]) <= compare.TEXT_LIMIT
    assert len(diff["diff"]) <= compare.DIFF_LIMIT


def test_raw_json_notebooks_with_list_sources_work():
    raw = {
        "cells": [
            {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["# NBVAL_IGNORE_OUTPUT\n", "x"],
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]}]},
            {"cell_type": "code", "execution_count": 2, "metadata": {}, "source": ["y"],
             "outputs": [{"output_type": "execute_result", "execution_count": 2, "metadata": {},
                          "data": {"text/plain": ["1\n", "2"]}}]},
        ]
    }
    actual = copy.deepcopy(raw)
    actual["cells"][0]["outputs"] = []
    actual["cells"][1]["outputs"][0]["data"]["text/plain"] = "1\n2"
    res = compare.compare_notebooks(raw, actual, strategy="exact")
    assert (res["result"], res["skippedCells"], res["matchedCells"]) == ("matched", 1, 1)


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError):
        compare.compare_notebooks(nb(), nb(), strategy="fuzzy")


def test_comparison_does_not_modify_inputs():
    golden = golden_notebook()
    actual = copy.deepcopy(golden)
    actual.cells[1].outputs = [stream("a"), stream("\rb\n")]
    before = (nbformat.writes(golden), nbformat.writes(actual))
    compare.compare_notebooks(golden, actual)
    assert (nbformat.writes(golden), nbformat.writes(actual)) == before


# --- markers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell, expected",
    [
        (new_code_cell("x"), (False, False, False, False)),
        (new_code_cell("x", metadata={"tags": ["skip-execution"]}), (True, False, False, False)),
        (new_code_cell("x", metadata={"tags": ["nbval-skip"]}), (True, False, False, False)),
        (new_code_cell("# NBVAL_SKIP\nx"), (True, False, False, False)),
        (new_code_cell("x", metadata={"tags": ["raises-exception"]}), (False, True, False, False)),
        (new_code_cell("x", metadata={"tags": ["nbval-raises-exception"]}), (False, True, False, False)),
        (new_code_cell("import os\n  #  NBVAL_RAISES_EXCEPTION\nx"), (False, True, False, False)),
        (new_code_cell("x", metadata={"tags": ["nbval-ignore-output"]}), (False, False, True, False)),
        (new_code_cell("#NBVAL_IGNORE_OUTPUT\nx"), (False, False, True, False)),
        (new_code_cell("# NBVAL_CHECK_OUTPUT\nx"), (False, False, False, True)),
        (new_code_cell("x  # NBVAL_SKIP"), (False, False, False, False)),  # not a comment line
        (new_code_cell("print('# NBVAL_SKIP')"), (False, False, False, False)),
        (new_markdown_cell("# NBVAL_SKIP"), (False, False, False, False)),
    ],
)
def test_cell_markers(cell, expected):
    m = cell_markers(cell)
    assert (m.skip, m.raises_exception, m.ignore_output, m.check_output) == expected


def test_notebook_execution_settings():
    assert notebook_execution_settings(nb()) == {"timeout": None, "allow_errors": False}
    meta = new_notebook(metadata={"execution": {"timeout": 5, "allow_errors": True}})
    assert notebook_execution_settings(meta) == {"timeout": 5, "allow_errors": True}
    weird = new_notebook(metadata={"execution": {"timeout": "soon", "allow_errors": "yes"}})
    assert notebook_execution_settings(weird) == {"timeout": None, "allow_errors": False}


# --- the upstream CRD's comparisonConfig fields ---------------------------------------


def test_output_selectors_leave_out_types_streams_and_mime_types():
    outs = [stream("x\n"), stream("warn\n", "stderr"), result({"text/plain": "1", "text/html": "<b>1</b>"}),
            new_output("display_data", data={"image/png": "AAA", "text/plain": "<Figure>"}),
            error("ValueError", "bad")]
    full = flatten.flatten_outputs(outs, compare_images=True)
    assert set(full) == {"stream:stdout", "stream:stderr", "text/plain", "text/html", "image/png", "error"}
    assert set(flatten.flatten_outputs(outs, compare_images=True, ignore=["stream"])) == \
        {"text/plain", "text/html", "image/png", "error"}
    assert "stream:stderr" not in flatten.flatten_outputs(outs, ignore=["stream:stderr"])
    assert "stream:stdout" in flatten.flatten_outputs(outs, ignore=["stream:stderr"])
    assert set(flatten.flatten_outputs(outs, compare_images=True, ignore=["image/*", "text/html"])) == \
        {"stream:stdout", "stream:stderr", "text/plain", "error"}
    assert flatten.flatten_outputs(outs, ignore=["execute_result"])["text/plain"] == ["<Figure>"]
    assert "error" not in flatten.flatten_outputs(outs, ignore=["error"])
    for bad in ("pictures", "image", "stream:", "/png", "text/html; charset=utf-8"):
        with pytest.raises(ValueError):
            flatten.check_output_selector(bad)
    with pytest.raises(ValueError):
        compare.compare_notebooks(nb(), nb(), ignore_output_types=["pictures"])


def test_timestamps_and_custom_patterns():
    g = nb(executed("print(now)", [stream("at 2026-11-30T10:00:00Z run=ab12\n")]))
    a = nb(executed("print(now)", [stream("at 2026-11-30T10:05:00Z run=ff99\n")]))
    assert compare.compare_notebooks(g, a)["diffs"][0]["cellIndex"] == 0  # the run id differs
    assert compare.compare_notebooks(g, a, timestamp_patterns=[r"run=\w+"])["result"] == "matched"
    kept = compare.compare_notebooks(g, a, timestamp_patterns=[r"run=\w+"], ignore_timestamps=False)
    assert kept["result"] == "failed" and "10:05:00" in kept["diffs"][0]["actual"]
    # exact mode never sanitises
    assert compare.compare_notebooks(g, a, strategy="exact", timestamp_patterns=[r"run=\w+"])["result"] == "failed"


def test_execution_counts_only_on_request():
    g = nb(executed("1", [result({"text/plain": "1"}, count=1)], count=1))
    a = nb(executed("1", [result({"text/plain": "1"}, count=3)], count=3))
    assert compare.compare_notebooks(g, a)["result"] == "matched"
    cr = compare.compare_notebooks(g, a, compare_execution_count=True)
    assert cr["result"] == "failed" and "execution_count: 1" in cr["diffs"][0]["expected"]
    assert "execution_count: 3" in cr["diffs"][0]["actual"]


def _old_line_ends(text: str) -> str:
    """sanitize's line handling as it was (split into lines, each rstripped, joined)."""
    import re

    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).rstrip()


def test_sanitize_strips_line_ends_as_str_rstrip_does_without_splitting_the_text():
    """The one-expression form (no list of millions of lines for a big output) gives exactly what
    the per-line rstrip gave, on random texts of every kind of whitespace Python strips."""
    import random

    from jupyter_nbvalidation.verdict.sanitize import sanitize

    alphabet = ["a", "1", " ", "\t", "\r", "\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2028",
                "\u3000", "\u200b", "x"]
    rng = random.Random(7)
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert sanitize(text, ()) == _old_line_ends(text), repr(text)


def test_a_huge_output_is_judged_whole_and_its_diff_shows_a_cut_with_the_digest():
    """Two outputs of 1 MB that differ only in their last character: the cell differs (the
    comparison reads whole values); the diff shows the first RENDER_CLIP characters and a line
    per side that says what is cut, with different digests, so the diff is never empty."""
    big = "y" * 1_000_000
    golden = [new_output("stream", name="stdout", text=big + "a\n")]
    actual = [new_output("stream", name="stdout", text=big + "b\n")]
    result = compare.compare_cell_outputs(golden, actual)
    assert not result.equal and result.diff_type == compare.OUTPUT_MISMATCH
    assert len(result.expected_text) < compare.RENDER_CLIP + 200 and len(result.diff) < 3 * compare.RENDER_CLIP
    cut = [ln for ln in result.diff.splitlines() if "more characters not shown" in ln]
    assert len(cut) == 2 and cut[0][1:] != cut[1][1:], cut
    assert compare.compare_cell_outputs(golden, [new_output("stream", name="stdout", text=big + "a\n")]).equal
