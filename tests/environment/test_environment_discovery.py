"""Where a job's environment comes from when its spec names no source
(environment_files.discover, requirements.collect): the repository root (the
nearest folder holding .git, never above the server root), binder/ first, then
from the notebook's folder upward the first of environment.yml, pylock.toml,
uv.lock, Pipfile.lock, Pipfile, requirements.txt, pyproject.toml / setup.py (the
lock files: tests/test_lock_files.py). Fast unit tests over
layouts made here, then a few real runs through `jupyter nbvalidation run`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import JUPYTER, NOBUILD, building, write_notebook
from helpers import run_repo as run

import jupyter_nbvalidation.environment.discovery as ef
import jupyter_nbvalidation.environment.reading as reading
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.environment.trees as trees
from jupyter_nbvalidation.environment.kinds.environment_yml import conda_to_pip
from jupyter_nbvalidation.spec.plan import requirements_sentence


def collect(root: Path, nb: str) -> reqmod.Requirements:
    """What submit makes of the notebook at API path ``nb`` with no requirements in its spec."""
    spec = {"notebook": {"path": nb}}
    return reqmod.collect(spec, str(root), os.path.realpath(root / nb))


@pytest.fixture
def repo(tmp_path):
    """server root tmp_path/root; a git repository root/repo with a notebook two folders down."""
    root = tmp_path / "root"
    (root / "repo" / ".git").mkdir(parents=True)
    write_notebook(root / "repo" / "notebooks" / "sub" / "nb.ipynb", ["print(1)"])
    return root


NB = "repo/notebooks/sub/nb.ipynb"


def test_the_repository_root_is_the_nearest_folder_with_git(repo):
    root = str(repo)
    assert ef.repository_root(f"{root}/repo/notebooks/sub", root) == f"{root}/repo"
    (repo / "repo" / "notebooks" / ".git").write_text("gitdir: ../.git/worktrees/x\n")  # a worktree: .git is a file
    assert ef.repository_root(f"{root}/repo/notebooks/sub", root) == f"{root}/repo/notebooks"
    (repo / "plain").mkdir()
    assert ef.repository_root(f"{root}/plain", root) == root  # no .git: the server root


def test_requirements_txt_at_the_repository_root(repo):
    (repo / "repo" / "requirements.txt").write_text("six==1.16.0\n# a comment\n")
    (repo / "requirements.txt").write_text("never-read-above-the-repository\n")  # above the repository root
    r = collect(repo, NB)
    assert r.display_lines == ["six==1.16.0"]
    assert r.origin == "requirements.txt at the repository root (repo/requirements.txt)"
    assert requirements_sentence(r.count, r.origin) == \
        "1 requirement from requirements.txt at the repository root (repo/requirements.txt)"
    assert r.source_path == str(repo / "repo" / "requirements.txt")


def test_the_nearest_folder_wins_and_beside_the_notebook_is_as_before(repo):
    (repo / "repo" / "requirements.txt").write_text("six\n")
    (repo / "repo" / "notebooks" / "requirements.txt").write_text("tabulate\n")
    r = collect(repo, NB)
    assert (r.display_lines, r.origin) == (["tabulate"], "requirements.txt in a folder above the notebook "
                                                          "(repo/notebooks/requirements.txt)")
    (repo / "repo" / "notebooks" / "sub" / "requirements.txt").write_text("packaging\n")
    r = collect(repo, NB)
    assert (r.display_lines, r.origin) == (["packaging"], "requirements.txt beside the notebook")
    # its messages name it as before
    (repo / "repo" / "notebooks" / "sub" / "requirements.txt").write_text("--trusted-host x\n")
    with pytest.raises(reqmod.RequirementsError) as e:
        collect(repo, NB)
    assert e.value.message.startswith("requirements.txt beside the notebook (repo/notebooks/sub/requirements.txt) "
                                      "line 1: --trusted-host is not accepted")


def test_a_binder_folder_takes_the_place_of_the_roots_files(repo):
    (repo / "repo" / "requirements.txt").write_text("six\n")
    (repo / "repo" / "binder").mkdir()
    r = collect(repo, NB)  # an empty binder folder: nothing from the root either (repo2docker)
    assert not r and r.origin == ("no dependencies declared: looked in repo/notebooks/sub, repo/notebooks, "
                                  "repo/binder (the repository's binder folder)")
    (repo / "repo" / "binder" / "requirements.txt").write_text("tabulate\n")
    r = collect(repo, NB)
    assert (r.display_lines, r.origin) == (["tabulate"], "repo/binder/requirements.txt (the repository's binder "
                                                         "folder)")
    (repo / "repo" / ".binder").mkdir()
    with pytest.raises(reqmod.RequirementsError, match="both a binder and a .binder folder"):
        collect(repo, NB)
    shutil.rmtree(repo / "repo" / "binder")
    (repo / "repo" / ".binder" / "environment.yml").write_text("dependencies:\n  - six=1.16\n")
    r = collect(repo, NB)
    assert r.display_lines == ["six==1.16.*"]
    assert r.origin == "repo/.binder/environment.yml (the repository's binder folder: 1 conda package)"


def test_nothing_found_says_where_it_looked(repo):
    r = collect(repo, NB)
    assert not r and r.display_lines == []
    assert r.origin == "no dependencies declared: looked in repo/notebooks/sub, repo/notebooks, repo (repository root)"
    assert requirements_sentence(r.count, r.origin) == (
        "no dependencies declared: looked in repo/notebooks/sub, repo/notebooks, repo (repository root) "
        "(the environment gets the kernel only)")
    # no .git anywhere: up to the server root, never above it
    write_notebook(repo / "plain" / "nb.ipynb", ["1"])
    (repo.parent / "requirements.txt").write_text("six\n")  # above the server root
    assert collect(repo, "plain/nb.ipynb").origin == "no dependencies declared: looked in plain, . (repository root)"


def test_a_symlink_out_of_the_root_is_refused_unread(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "requirements.txt").write_text("OUTSIDE-MARKER\n")
    (repo / "repo" / "requirements.txt").symlink_to(outside / "requirements.txt")
    with pytest.raises(reqmod.RequirementsError) as e:
        collect(repo, NB)
    assert "requirements.txt at the repository root (repo/requirements.txt)" in e.value.message
    assert "outside the server root" in e.value.message and "OUTSIDE-MARKER" not in e.value.message
    (repo / "repo" / "requirements.txt").unlink()
    (repo / "repo" / "binder").symlink_to(outside, target_is_directory=True)
    with pytest.raises(reqmod.RequirementsError, match="outside the server root"):
        collect(repo, NB)


def test_environment_yml(repo):
    (repo / "repo" / "environment.yml").write_text(
        "name: demo\nchannels: [conda-forge]\ndependencies:\n"
        "  - python=3.11\n  - pip\n  - numpy=1.26\n  - conda-forge::pandas>=2.1\n  - scipy 1.11.* py311_0\n"
        "  - pytorch\n  - cudatoolkit=11.8\n  - r-base\n  - libgcc-ng\n"
        "  - pip:\n    - six==1.16.0\n    - ./pkg\n")
    (repo / "repo" / "pkg").mkdir()
    (repo / "repo" / "requirements.txt").write_text("ignored\n")  # environment.yml comes first
    r = collect(repo, NB)
    pkg = str((repo / "repo" / "pkg").resolve())
    assert r.display_lines == ["numpy==1.26.*", "pandas>=2.1", "scipy==1.11.*", "torch", "six==1.16.0", pkg]
    assert r.local_paths == [pkg]
    assert r.origin == ("environment.yml at the repository root (repo/environment.yml: pip section and 4 conda "
                        "packages; not installed (conda-only): cudatoolkit, r-base, libgcc-ng)")
    # only conda-only packages: nothing to install, and the sentence says which file
    (repo / "repo" / "environment.yml").write_text("dependencies: [python, cudatoolkit]\n")
    r = collect(repo, NB)
    assert requirements_sentence(r.count, r.origin) == (
        "no requirements to install from environment.yml at the repository root (repo/environment.yml: 0 conda "
        "packages; not installed (conda-only): cudatoolkit) (the environment gets the kernel only)")


@pytest.mark.parametrize("conda, pip", [
    ("numpy", "numpy"), ("numpy=1.26", "numpy==1.26.*"), ("numpy==1.26.4", "numpy==1.26.4"),
    ("numpy>=1.2", "numpy>=1.2"), ("numpy>=1.2,<2", "numpy>=1.2,<2"), ("numpy=1.26.*", "numpy==1.26.*"),
    ("numpy=1.26.4=py311h0", "numpy==1.26.4.*"), ("numpy 1.26", "numpy==1.26.*"), ("Python=3.11", None),
    ("pip", None), ("nodejs", None), ("matplotlib-base", "matplotlib"),
])
def test_conda_specs_as_pip_requirements(conda, pip):
    assert conda_to_pip(conda) == pip


def test_pipfile_lock_and_pipfile(repo):
    folder = repo / "repo"
    (folder / "Pipfile").write_text('[packages]\nsix = "*"\nrequests = {version = ">=2", extras = ["socks"]}\n'
                                    'tabulate = "==0.9.0"\n[dev-packages]\npytest = "*"\n')
    r = collect(repo, NB)
    assert r.display_lines == ["six", "requests[socks]>=2", "tabulate==0.9.0"]
    assert r.origin == "Pipfile at the repository root (repo/Pipfile: [packages], 3 packages)"
    (folder / "Pipfile.lock").write_text(json.dumps({
        "_meta": {}, "default": {"six": {"version": "==1.16.0", "hashes": []},
                                 "idna": {"version": "==3.6", "markers": "python_version >= '3.5'"}},
        "develop": {"pytest": {"version": "==8.0.0"}}}))
    r = collect(repo, NB)  # the lock file comes first
    assert r.display_lines == ["idna==3.6 ; python_version >= '3.5'", "six==1.16.0"]
    assert r.origin == "Pipfile.lock at the repository root (repo/Pipfile.lock: the default section, 2 packages)"


def test_the_project_itself_from_pyproject_or_setup_py(repo):
    folder = repo / "repo"
    (folder / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n")  # tool settings only: not a project
    assert collect(repo, NB).origin.startswith("no dependencies declared")
    (folder / "pyproject.toml").write_text('[project]\nname = "pint"\nversion = "1"\n')
    r = collect(repo, NB)
    real = str(folder.resolve())
    assert r.display_lines == [real] and r.local_paths == [real] and r.project_file == "repo/pyproject.toml"
    assert r.origin == "pyproject.toml at the repository root (project pint, installed from repo)"
    key = r.cache_key_material()["local"][real]
    (folder / "notebooks" / "pint.py").write_text("x = 1\n")  # an edit of the project's tree: another key
    assert collect(repo, NB).cache_key_material()["local"][real] != key
    (folder / "pyproject.toml").unlink()
    (folder / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (folder / "setup.cfg").write_text("[metadata]\nname = legacy\n")
    r = collect(repo, NB)
    assert r.origin == "setup.py at the repository root (project legacy, installed from repo)"
    assert r.display_lines == [real]


@pytest.mark.parametrize("name, text, reason", [
    ("environment.yml", "dependencies: [numpy\n", "is not valid YAML"),
    ("environment.yml", "- numpy\n", "is not a mapping"),
    ("environment.yml", "dependencies: {numpy: 1}\n", "dependencies is not a list"),
    ("environment.yml", "dependencies:\n  - pip: numpy\n", "pip is not a list of requirement lines"),
    ("environment.yml", "dependencies: ['numpy 1.2|1.3']\n", "version alternatives"),
    ("environment.yml", "dependencies:\n  - pip: ['--trusted-host x']\n", "--trusted-host is not accepted"),
    ("Pipfile", "[packages\nsix = '*'\n", "is not valid TOML"),
    ("Pipfile.lock", "{not json", "is not valid JSON"),
    ("Pipfile.lock", '{"default": {"six": {"version": ">=1"}}}', "a locked version is ==VERSION"),
    ("pyproject.toml", "[project\n", "is not valid TOML"),
])
def test_parse_errors_name_the_file_and_the_reason(repo, name, text, reason):
    (repo / "repo" / name).write_text(text)
    with pytest.raises(reqmod.RequirementsError) as e:
        collect(repo, NB)
    assert e.value.status == 400 and e.value.field == "spec.podConfig.buildConfig.requirementsFile"
    assert f"repo/{name}" in e.value.message or name in e.value.message
    assert reason in e.value.message


def test_an_oversized_file_is_refused_before_it_is_read(repo, monkeypatch):
    monkeypatch.setattr(reading, "MAX_FILE_BYTES", 100)
    (repo / "repo" / "environment.yml").write_text("dependencies:\n" + "  - six\n" * 50)
    with pytest.raises(reqmod.OverLimit, match="the limit is 100 bytes"):
        collect(repo, NB)


def test_the_origin_is_stored_with_the_job_and_read_back():
    job = {"metadata": {"annotations": {reqmod.ORIGIN_ANNOTATION: "requirements.txt at the repository root "
                                                                  "(requirements.txt)"}},
           "spec": {"notebook": {"path": "a/nb.ipynb"}}}
    assert reqmod.of_job(job, "six\n", None).origin == "requirements.txt at the repository root (requirements.txt)"
    job["metadata"]["annotations"][reqmod.ORIGIN_ANNOTATION] = "no dependencies declared: looked in a, . (repository root)"
    assert reqmod.of_job(job, None, None).origin.startswith("no dependencies declared: looked in a")
    old = {"metadata": {"annotations": {}}, "spec": {"notebook": {"path": "a/nb.ipynb"}}}  # stored before
    assert reqmod.of_job(old, "six\n", None).origin == "requirements.txt beside the notebook"
    assert reqmod.of_job(old, None, None).origin == "no requirements declared"


# --- real runs through `jupyter nbvalidation run` (each build is real: few, light) ------------------



def test_run_a_repository_whose_root_declares_the_environment(tmp_path):
    """requirements.txt at the repository root for a notebook two folders down: Succeeded; the
    same inputs again: Unchanged; a new binder/ folder and then the root file removed are each a
    change (never Unchanged); without any file: ModuleNotFoundError. Then environment.yml (its pip
    section, a conda-only package named, not installed)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_notebook(repo / "notebooks" / "sub" / "nb.ipynb", ["import six\nprint(six.__name__)"])
    (repo / "requirements.txt").write_text("six\n")

    _, row = run(tmp_path)
    assert row["verdict"] == "Succeeded", row
    assert building(tmp_path, row["job"]) == ("Building the environment: 1 requirement from requirements.txt at the "
                                              "repository root (repo/requirements.txt).")
    _, row = run(tmp_path)
    assert row["verdict"] == "Unchanged", row

    (repo / "binder").mkdir()
    (repo / "binder" / "requirements.txt").write_text("six>=1.0\n")
    _, row = run(tmp_path)
    assert row["verdict"] == "Succeeded", row  # not Unchanged: another environment
    assert building(tmp_path, row["job"]) == ("Building the environment: 1 requirement from repo/binder/requirements.txt "
                                              "(the repository's binder folder).")

    shutil.rmtree(repo / "binder")
    (repo / "requirements.txt").unlink()
    proc, row = run(tmp_path)
    assert proc.returncode == 1 and row["verdict"] == "Failed", row
    assert "ModuleNotFoundError" in row["firstFailure"] and "six" in row["firstFailure"], row
    assert building(tmp_path, row["job"]) == (
        "Building the environment: no dependencies declared: looked in repo/notebooks/sub, repo/notebooks, repo "
        "(repository root) (the environment gets the kernel only).")

    # environment.yml: the pip section installed, python and pip dropped, cudatoolkit named and not
    # installed. Its lines are the first run's ("six"): the same environment (reused, not built again)
    # and the same verdict key, so `run` would answer Unchanged (the verdict depends on what is
    # installed, not on which file said so): --no-cache runs it
    (repo / "environment.yml").write_text("name: demo\nchannels: [conda-forge]\ndependencies:\n  - python=3.11\n"
                                          "  - pip\n  - cudatoolkit=11.8\n  - pip:\n    - six\n")
    _, row = run(tmp_path, "--no-cache")
    assert row["verdict"] == "Succeeded", row
    assert building(tmp_path, row["job"]) == (
        "Building the environment: 1 requirement from environment.yml at the repository root (repo/environment.yml: "
        "pip section and 0 conda packages; not installed (conda-only): cudatoolkit).")


def test_run_a_repository_whose_pyproject_declares_the_project(tmp_path):
    """pyproject.toml at the repository root: the project is installed (with its dependency) and
    the notebook imports it; the origin names the project."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "nbvtinyproj"\nversion = "0.1"\ndependencies = ["six"]\n'
        '[tool.setuptools]\npackages = ["nbvtinyproj"]\n')
    (repo / "nbvtinyproj").mkdir()
    (repo / "nbvtinyproj" / "__init__.py").write_text("import six\nVALUE = 'tiny via ' + six.__name__\n")
    write_notebook(repo / "notebooks" / "nb.ipynb", ["import nbvtinyproj\nprint(nbvtinyproj.VALUE)"])
    _, row = run(tmp_path)
    assert row["verdict"] == "Succeeded", row
    assert building(tmp_path, row["job"]) == ("Building the environment: 1 requirement from pyproject.toml at the "
                                              "repository root (project nbvtinyproj, installed from repo).")
    # the notebook needs an extra of the project: red without it, green with --extra
    text = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(text + '[project.optional-dependencies]\nweb = ["idna"]\n')
    write_notebook(repo / "notebooks" / "nb.ipynb", ["import nbvtinyproj\nprint(nbvtinyproj.VALUE)", "import idna"])
    _, row = run(tmp_path)
    assert row["verdict"] == "Failed" and "idna" in json.dumps(row["firstFailure"]), row
    _, row = run(tmp_path, "--extra", "web")
    assert row["verdict"] == "Succeeded", row
    assert building(tmp_path, row["job"]) == ("Building the environment: 1 requirement from pyproject.toml at the "
                                              "repository root (project nbvtinyproj with extras web, installed "
                                              "from repo).")


def test_extras_are_the_projects_own_and_checked_at_submit(repo):
    from jupyter_nbvalidation.spec.checks import SpecError, validate_spec

    def extras(*names: str) -> reqmod.Requirements:
        spec = {"notebook": {"path": NB}, "podConfig": {"buildConfig": {"extras": list(names)}}}
        return reqmod.collect(spec, str(repo), os.path.realpath(repo / NB))

    (repo / "repo" / "pyproject.toml").write_text(
        '[project]\nname = "pint"\nversion = "1"\n[project.optional-dependencies]\nPlot_Extra = ["six"]\n')
    got = extras("plot-extra", "plot-extra")
    assert got.display_lines == [f"{(repo / 'repo').resolve()}[plot-extra]"]
    assert "project pint with extras plot-extra" in got.origin
    for names, field, says in [(("nope",), "spec.podConfig.buildConfig.extras",
                                "declares no extra 'nope' (it declares: plot-extra)"),
                               (("bad name",), "spec.podConfig.buildConfig.extras[0]", "is not an extra's name")]:
        with pytest.raises(reqmod.RequirementsError) as e:
            extras(*names)
        assert e.value.field == field and says in e.value.message, e.value.message
    (repo / "repo" / "requirements.txt").write_text("six\n")  # now the environment is not the project
    with pytest.raises(reqmod.RequirementsError) as e:
        extras("plot-extra")
    assert "which installs no project" in e.value.message
    (repo / "repo" / "requirements.txt").unlink()
    (repo / "repo" / "pyproject.toml").unlink()
    with pytest.raises(reqmod.RequirementsError) as e:
        extras("plot-extra")
    assert "none was found" in e.value.message
    for bc in ({"extras": ["x"], "requirements": ["six"]}, {"extras": ["x"], "enabled": False}):
        with pytest.raises(SpecError) as s:
            validate_spec({"notebook": {"path": NB}, "podConfig": {"buildConfig": bc}})
        assert s.value.field == "podConfig.buildConfig.extras"


def test_a_backend_without_local_paths_refuses_the_project_naming_it(repo):
    """A backend that builds where the server's files are not and cannot carry them (no
    local_requirement_paths; the Kubernetes backend carries them: test_k8s_real_discovery): a
    discovered pyproject.toml is a 400 that names it and says the project cannot be installed."""
    from types import SimpleNamespace

    from jupyter_nbvalidation.backends.base import Capabilities
    from jupyter_nbvalidation.service.errors import ApiError
    from jupyter_nbvalidation.service.jobs import JobService

    (repo / "repo" / "pyproject.toml").write_text('[project]\nname = "pint"\nversion = "1"\n')
    reqs = collect(repo, NB)
    service = SimpleNamespace(backend=SimpleNamespace(name="remote", capabilities=Capabilities()))
    with pytest.raises(ApiError) as e:
        JobService._check_requirement_features(service, reqs)  # type: ignore[arg-type]
    assert e.value.status == 400 and e.value.field == "spec.podConfig.buildConfig.requirementsFile"
    message = str(e.value.message)
    assert "pyproject.toml at the repository root (project pint, installed from repo)" in message
    assert "repo/pyproject.toml" in message and "the remote backend cannot install the project from the " \
                                                "server's files yet" in message
    # requirement lines from a discovered file travel as they are
    (repo / "repo" / "pyproject.toml").unlink()
    (repo / "repo" / "requirements.txt").write_text("six\n")
    JobService._check_requirement_features(service, collect(repo, NB))  # type: ignore[arg-type]


def test_a_virtual_environment_in_the_project_is_not_its_content(repo):
    """A project at the repository root often has a venv/ beside it: not hashed (it would be over
    the bounds, and it is not what the project installs)."""
    folder = repo / "repo"
    (folder / "pyproject.toml").write_text('[project]\nname = "pint"\nversion = "1"\n')
    real = str(folder.resolve())
    before = collect(repo, NB).cache_key_material()["local"][real]
    (folder / "venv" / "lib").mkdir(parents=True)
    (folder / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (folder / "venv" / "lib" / "x.py").write_text("1\n")
    (folder / "notebooks" / ".ipynb_checkpoints").mkdir()
    (folder / "notebooks" / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_text("{}")
    assert collect(repo, NB).cache_key_material()["local"][real] == before


def test_a_project_too_big_to_hash_is_refused_saying_how_to_do_without(repo, monkeypatch):
    monkeypatch.setattr(trees, "MAX_TREE_FILES", 3)
    (repo / "repo" / "pyproject.toml").write_text('[project]\nname = "pint"\nversion = "1"\n')
    for i in range(4):
        (repo / "repo" / f"m{i}.py").write_text("1\n")
    with pytest.raises(reqmod.RequirementsError) as e:
        collect(repo, NB)
    assert e.value.message.startswith("pyproject.toml at the repository root (repo/pyproject.toml): the local path")
    assert "cannot be hashed for the cache key" in e.value.message and "requirements.txt beside it" in e.value.message


def test_the_python_a_repository_asks_for(repo):
    """runtime.txt (repo2docker's python-3.X[.Y]) beside the chosen file, else requires-python."""
    (repo / "repo" / "requirements.txt").write_text("six\n")
    assert collect(repo, NB).python_requires is None
    (repo / "repo" / "runtime.txt").write_text("python-3.9\n")
    assert collect(repo, NB).python_requires == ("==3.9.*", "runtime.txt (repo/runtime.txt)")
    (repo / "repo" / "runtime.txt").write_text("python-3.11.4")
    assert collect(repo, NB).python_requires == ("==3.11.4", "runtime.txt (repo/runtime.txt)")
    (repo / "repo" / "runtime.txt").write_text("r-4.1-2022-01-01\n")
    with pytest.raises(reqmod.RequirementsError, match=r"runtime.txt \(repo/runtime.txt\): 'r-4.1-2022-01-01' "
                                                       r"names no Python version"):
        collect(repo, NB)
    (repo / "repo" / "runtime.txt").unlink()
    (repo / "repo" / "requirements.txt").unlink()
    (repo / "repo" / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\nrequires-python = ">=3.99"\n')
    assert collect(repo, NB).python_requires == (">=3.99", "repo/pyproject.toml's requires-python")


def test_a_python_the_server_cannot_build_with_is_refused_at_submit(tmp_path):
    """A clear 400 (`run` exits 2, nothing created) rather than a verdict from a Python the
    repository did not declare."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_notebook(repo / "notebooks" / "nb.ipynb", ["print(1)"])
    (repo / "requirements.txt").write_text("six\n")
    (repo / "runtime.txt").write_text("python-2.7\n")
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", "repo", "--local", "--data-dir", str(tmp_path / "data"),
                           "-o", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-rt")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)
    here = ".".join(map(str, sys.version_info[:3]))
    assert row["verdict"] == "Refused" and (
        f"runtime.txt (repo/runtime.txt) asks for Python ==2.7.*; environments here are built with Python {here}"
        in row["firstFailure"]), row
    listed = subprocess.run([JUPYTER, "nbvalidation", "list", "--local", "--data-dir", str(tmp_path / "data"),
                             "-o", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert json.loads(listed.stdout)["items"] == []


def test_binder_files_that_are_not_packages_are_named_not_run(repo):
    """apt.txt, postBuild, start ... beside the environment's file (repo2docker acts on them): not
    run here, and the origin every verdict shows says so, so a failure they explain is read as such."""
    binder = repo / "repo" / "binder"
    binder.mkdir()
    (binder / "requirements.txt").write_text("six\n")
    assert "not run here" not in collect(repo, NB).origin
    (binder / "apt.txt").write_text("graphviz\n")
    (binder / "postBuild").write_text("#!/bin/sh\njupyter labextension install x\n")
    got = collect(repo, NB)
    assert got.display_lines == ["six"]
    assert got.origin.endswith("; not run here: apt.txt (system packages), postBuild"), got.origin


def _another_python() -> tuple[str, str]:
    """An interpreter on PATH whose version is not this one's (this machine kind has Debian's
    /usr/bin/python3 beside the Python the venv is made from)."""
    here = ".".join(map(str, sys.version_info[:3]))
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for name in ("python3", "python3.11", "python3.12", "python3.13"):
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK):
                out = subprocess.run([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                     capture_output=True, text=True, timeout=60)
                if out.returncode == 0 and out.stdout.strip() != here:
                    return path, out.stdout.strip()
    pytest.fail(f"no interpreter on PATH other than Python {here}: this test needs two (Debian's python3 is one)")


def test_the_python_a_repository_asks_for_is_picked_among_those_here(tmp_path):
    """runtime.txt asks for a Python that LocalBackend.python is not: the environment is built with
    the interpreter here that fits (LocalBackend.pythons: python3* on PATH by default), the kernel
    runs it, and the verdict says so; environment.yml's python= is read the same way."""
    other, version = _another_python()
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_notebook(repo / "nb.ipynb", ["import platform, six\nprint(platform.python_version())"])
    (repo / "requirements.txt").write_text("six\n")
    (repo / "runtime.txt").write_text(f"python-{version}\n")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-rt")}
    data = str(tmp_path / "data")
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", "repo", "--local", "--data-dir", data, "-o", "json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)
    assert f"Python {version} (" in row["environment"] and "as runtime.txt (repo/runtime.txt) asks" \
        in row["environment"], row
    shown = subprocess.run([JUPYTER, "nbvalidation", "describe", "--local", "--data-dir", data, row["job"],
                            "-o", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL, env=env)
    assert json.loads(shown.stdout)["environment"]["python"]["version"] == version, shown.stdout[-2000:]

    (repo / "runtime.txt").unlink()
    (repo / "requirements.txt").unlink()
    (repo / "environment.yml").write_text("name: x\ndependencies:\n  - python=3.9\n  - six\n")
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", "repo", "--local", "--data-dir", data, "-o", "json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)
    assert "repo/environment.yml's python asks for Python ==3.9.*; environments here are built with Python " \
        in row["firstFailure"], row


@pytest.mark.asyncio
async def test_the_other_pythons_are_asked_only_when_a_job_needs_one(tmp_path):
    """LocalBackend.pythons are run to ask their versions only when a repository asks for a
    Python the base interpreter is not, once per process, off the event loop: never at start
    and never for a job that asks for none (every python3* on PATH is a pyenv shell script on
    some machines, a second of CPU per server, CLI and in-process run). The job that asks is
    built with the interpreter that answered and the verdict says so."""
    from conftest import make_local

    from jupyter_nbvalidation.core.model import Phase

    probes = tmp_path / "probes.log"
    other = tmp_path / "bin" / "python3.99"
    other.parent.mkdir()
    # answers the version question as Python 3.99.0 (logged); anything else is this interpreter
    other.write_text(f"#!/bin/sh\ncase \"$*\" in *sys.version_info*cpython*) echo probe >> {shlex.quote(str(probes))}; "
                     f"echo 3.99.0; exit 0;; esac\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    other.chmod(0o755)
    env = make_local(tmp_path, backend_kw={"pythons": [str(other)]})
    await env.engine.start()
    try:
        write_notebook(env.root / "plain" / "nb.ipynb", ["print(1)"])
        done = await env.run(notebook={"path": "plain/nb.ipynb"}, podConfig=NOBUILD)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert not probes.exists(), "an interpreter of LocalBackend.pythons was run for a job that needs none"

        (env.root / "asks" / ".git").mkdir(parents=True)
        write_notebook(env.root / "asks" / "nb.ipynb", ["import six"])
        (env.root / "asks" / "requirements.txt").write_text("six\n")
        (env.root / "asks" / "runtime.txt").write_text("python-3.99\n")
        done = await env.run(notebook={"path": "asks/nb.ipynb"})
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert "Python 3.99.0" in json.dumps(done["status"]), done["status"]
        done = await env.run(notebook={"path": "asks/nb.ipynb"})
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert probes.read_text().splitlines() == ["probe"], "asked more than once in one process"
    finally:
        await env.engine.stop()
