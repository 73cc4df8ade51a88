"""spec/project.py and spec/project_write.py on real files: where the settings file is, what a
notebook gets (defaults, matching entries, the request over them), the errors naming the file, the
line and the key, and the text edit that keeps every other byte."""

from __future__ import annotations

import pytest

from jupyter_nbvalidation.spec import project as P
from jupyter_nbvalidation.spec import project_write as W

PYPROJECT = """\
[project]
name = "x"  # keep me

[tool.nbvalidation]
timeout = "10m"
comparisonConfig = { lax = true, ignoreOutputTypes = ["stream:stderr"] }

[[tool.nbvalidation.notebooks]]
glob = "lessons/**/*.ipynb"
comparisonConfig = { floatingPointTolerance = 0.5 }

[[tool.nbvalidation.notebooks]]
glob = "lessons/week1/a.ipynb"
goldenNotebook = { path = "golden.ipynb" }
podConfig.buildConfig.requirementsFile = "req.txt"

# about ruff
[tool.ruff]
line-length = 100
"""


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for rel in ("lessons/week1/a.ipynb", "lessons/week1/golden.ipynb", "lessons/b.ipynb", "c.ipynb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    return tmp_path


def test_defaults_then_matching_entries_in_order(proj):
    s = P.load(proj / "pyproject.toml")
    assert s.options_for(proj / "c.ipynb") == {"timeout": "10m", "comparisonConfig": {
        "lax": True, "ignoreOutputTypes": ["stream:stderr"]}}
    a = s.options_for(proj / "lessons/week1/a.ipynb")
    assert a["comparisonConfig"] == {"lax": True, "ignoreOutputTypes": ["stream:stderr"], "floatingPointTolerance": 0.5}
    assert a["goldenNotebook"] == {"path": "golden.ipynb"}
    assert s.options_for(proj / "lessons/b.ipynb")["comparisonConfig"]["floatingPointTolerance"] == 0.5
    assert s.own_entry(proj / "lessons/week1/a.ipynb").glob == "lessons/week1/a.ipynb"
    assert s.own_entry(proj / "lessons/b.ipynb") is None


def test_the_request_wins_field_by_field_and_over_what_its_choice_contradicts(proj):
    s = P.load(proj / "pyproject.toml")
    nb = proj / "lessons/week1/a.ipynb"
    spec = {"notebook": {"path": "lessons/week1/a.ipynb"}, "comparisonConfig": {"lax": False},
            "podConfig": {"buildConfig": {"requirements": ["six"]}}}
    got = P.fill_spec(spec, s, nb, "lessons/week1/a.ipynb")
    assert got["comparisonConfig"] == {"lax": False, "ignoreOutputTypes": ["stream:stderr"],
                                       "floatingPointTolerance": 0.5}
    assert got["podConfig"]["buildConfig"] == {"requirements": ["six"]}  # not beside the file's requirementsFile
    assert got["goldenNotebook"] == {"path": "lessons/week1/golden.ipynb"}  # from the root, as a spec has it
    assert got["timeout"] == "10m"


def test_which_file(tmp_path):
    nb = tmp_path / "repo" / "sub" / "nb.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text("{}")
    assert P.locate(nb, tmp_path) == tmp_path / "nbvalidation.toml"  # nothing: the root
    (tmp_path / "repo" / ".git").mkdir()
    assert P.locate(nb, tmp_path) == tmp_path / "repo" / "nbvalidation.toml"  # a repository's top
    (tmp_path / "repo" / "sub" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert P.locate(nb, tmp_path) == tmp_path / "repo" / "sub" / "pyproject.toml"  # the nearest project file
    (tmp_path / "repo" / "sub" / "nbvalidation.toml").write_text("timeout = '1m'\n")
    assert P.locate(nb, tmp_path) == tmp_path / "repo" / "sub" / "nbvalidation.toml"  # pyproject has no table
    assert P.settings_folder_above(nb.parent) == nb.parent
    assert P.locate(nb, nb.parent) == nb.parent / "nbvalidation.toml"


@pytest.mark.parametrize("change,where", [
    (("floatingPointTolerance = 0.5", "floatingPointTolerence = 0.5"),
     "pyproject.toml:10: tool.nbvalidation.notebooks[0].comparisonConfig.floatingPointTolerence: unknown key"),
    (('timeout = "10m"', 'timeout = "10 minutes"'), "pyproject.toml:5: tool.nbvalidation.timeout: must be a duration"),
    (('requirementsFile = "req.txt"', "requirementsFile = 3"),
     "pyproject.toml:15: tool.nbvalidation.notebooks[1].podConfig.buildConfig.requirementsFile: must be a non-empty string"),
    (('glob = "lessons/**/*.ipynb"\n', ""), "pyproject.toml:8: tool.nbvalidation.notebooks[0].glob: is required"),
    (('timeout = "10m"', 'timeout = "10m"\nnotebook = { path = "x.ipynb" }'),
     "pyproject.toml:6: tool.nbvalidation.notebook: is not a setting"),
    (('timeout = "10m"', "timeout = 10m"), "pyproject.toml:5: timeout: not valid TOML"),
])
def test_a_malformed_file_names_the_file_the_line_and_the_key(proj, change, where):
    (proj / "pyproject.toml").write_text(PYPROJECT.replace(*change))
    with pytest.raises(P.SettingsError) as e:
        P.load(proj / "pyproject.toml", "pyproject.toml")
    assert str(e.value).startswith(where), str(e.value)


def test_goldens_named_by_the_file(proj):
    finder = P.GoldenFinder()
    assert finder.is_golden(proj / "lessons/week1/golden.ipynb")
    assert not finder.is_golden(proj / "lessons/week1/a.ipynb") and not finder.is_golden(proj / "c.ipynb")


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_the_edit_keeps_every_other_byte(newline):
    text = PYPROJECT.replace("\n", newline)
    one = W.edited(text, "tool.nbvalidation.", "c.ipynb", {"cellTimeout": "90s", "parameters": {"n": [1, 2.5]}})
    assert one.startswith(text.split("# about ruff")[0].rstrip(newline))
    assert one.endswith(f"# about ruff{newline}[tool.ruff]{newline}line-length = 100{newline}")
    assert f'glob = "c.ipynb"{newline}cellTimeout = "90s"{newline}parameters = {{ n = [1, 2.5] }}{newline}' in one
    two = W.edited(one, "tool.nbvalidation.", "lessons/week1/a.ipynb", {"timeout": "1m"})
    assert 'requirementsFile = "req.txt"' not in two and f'glob = "lessons/week1/a.ipynb"{newline}timeout = "1m"' in two
    three = W.edited(W.edited(two, "tool.nbvalidation.", "c.ipynb", {}), "tool.nbvalidation.",
                     "lessons/week1/a.ipynb", {"goldenNotebook": {"path": "golden.ipynb"},
                                               "podConfig": {"buildConfig": {"requirementsFile": "req.txt"}}})
    import tomllib

    assert "c.ipynb" not in three and tomllib.loads(three) == tomllib.loads(text)
    head = text.split(f"[[tool.nbvalidation.notebooks]]{newline}glob = \"lessons/week1")[0]
    assert three.startswith(head) and three.endswith(text[text.index("# about ruff"):])


def test_values_toml_cannot_hold_and_layouts_the_edit_does_not_handle_are_refused():
    with pytest.raises(ValueError, match="null cannot be written"):
        W.toml_value({"x": None}, "parameters")
    inline = '[tool.nbvalidation]\nnotebooks = [{ glob = "a.ipynb", timeout = "1m" }]\n'
    with pytest.raises(W.WriteRefused):
        W.edited(inline, "tool.nbvalidation.", "a.ipynb", {"timeout": "2m"})
    tricky = 'x = """\n[[tool.nbvalidation.notebooks]]\n"""\n'  # a header inside a multi-line string
    with pytest.raises(W.WriteRefused):
        W.edited(tricky, "tool.nbvalidation.", "a.ipynb", {"timeout": "2m"})
    fresh = W.edited("", "", "a.ipynb", {"comparisonConfig": {"customTimestampPatterns": ['\\d+ "s"\t']}})
    import tomllib

    assert tomllib.loads(fresh)["notebooks"] == [{"glob": "a.ipynb", "comparisonConfig": {
        "customTimestampPatterns": ['\\d+ "s"\t']}}]


def test_an_entry_for_a_path_with_glob_characters_matches_that_notebook(tmp_path):
    nb = tmp_path / "[draft] a?.ipynb"
    nb.write_text("{}")
    W.write_entry(tmp_path / "nbvalidation.toml", "[draft] a?.ipynb", {"timeout": "1m"})
    s = P.load(tmp_path / "nbvalidation.toml")
    assert s.options_for(nb) == {"timeout": "1m"} and s.own_entry(nb) is not None
    assert s.options_for(tmp_path / "other.ipynb") == {}


def test_a_projects_own_broken_pyproject_is_no_settings_but_one_meant_for_us_is_an_error(tmp_path):
    nb = tmp_path / "nb.ipynb"
    nb.write_text("{}")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nname = "twice"\n')  # not TOML: a duplicate key
    assert P.load(tmp_path / "pyproject.toml").options_for(nb) == {}
    with pytest.raises(W.WriteRefused, match="not valid TOML"):  # never edited (the route's 409), never 500
        W.write_entry(tmp_path / "pyproject.toml", "nb.ipynb", {"timeout": "1m"})
    (tmp_path / "pyproject.toml").write_text('[tool.nbvalidation]\ntimeout = "1m"\ntimeout = "2m"\n')
    with pytest.raises(P.SettingsError, match=r"pyproject.toml:3: timeout: not valid TOML"):
        P.load(tmp_path / "pyproject.toml", "pyproject.toml")
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "nbvalidation.toml").write_text('timeout = "1m"\ntimeout = "2m"\n')
    with pytest.raises(P.SettingsError, match=r"nbvalidation.toml:2: timeout: not valid TOML"):
        P.load(tmp_path / "nbvalidation.toml", "nbvalidation.toml")
