"""Lock files as a repository declares its environment (issue 21): pylock.toml (PEP 751), read
here, and uv.lock, exported by uv itself (`uv export --frozen --offline`; real uv, real locks made
with `uv lock` against a local folder of wheels, no network). Where they come in the discovery
order, what each entry becomes, what is refused (a 400 naming the file and the reason), then a
real build through `jupyter nbvalidation run` that installs the locked version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import building, cli, make_wheel, write_notebook
from helpers import run_repo as run

import jupyter_nbvalidation.environment.kinds.lock_files as lock_files
import jupyter_nbvalidation.environment.kinds.uv_lock as ef
import jupyter_nbvalidation.environment.requirements as reqmod
from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.spec.plan import requirements_sentence

NB = "repo/notebooks/nb.ipynb"
FIELD = "spec.podConfig.buildConfig.requirementsFile"


def collect(root: Path, nb: str = NB) -> reqmod.Requirements:
    spec = {"notebook": {"path": nb}}
    return reqmod.collect(spec, str(root), os.path.realpath(root / nb))


def refused(root: Path, nb: str = NB) -> reqmod.RequirementsError:
    with pytest.raises(reqmod.RequirementsError) as e:
        collect(root, nb)
    assert e.value.status == 400 and e.value.field == FIELD, e.value.message
    return e.value


@pytest.fixture
def repo(tmp_path):
    """server root tmp_path/root; a git repository root/repo with a notebook one folder down."""
    root = tmp_path / "root"
    (root / "repo" / ".git").mkdir(parents=True)
    write_notebook(root / "repo" / "notebooks" / "nb.ipynb", ["print(1)"])
    return root


# --- pylock.toml ---------------------------------------------------------------------------

PYLOCK = """\
lock-version = "1.0"
created-by = "hand"
requires-python = ">=3.10"
default-groups = ["docs"]

[[packages]]
name = "six"
version = "1.17.0"
index = "https://pypi.org/simple"
wheels = [{ url = "https://files.pythonhosted.org/packages/six-1.17.0-py2.py3-none-any.whl", hashes = { sha256 = "ab" } }]

[[packages]]
name = "colorama"
version = "0.4.6"
marker = "sys_platform == 'win32'"
wheels = [{ url = "https://files.pythonhosted.org/packages/colorama-0.4.6-py2.py3-none-any.whl", hashes = { sha256 = "cd" } }]

[[packages]]
name = "torch"
version = "2.5.1+cpu"
marker = "python_version >= '3.10'"
index = "https://download.pytorch.org/whl/cpu"
wheels = [{ name = "torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl", url = "https://download.pytorch.org/whl/cpu/torch-2.5.1%2Bcpu-cp311-cp311-linux_x86_64.whl", hashes = { sha256 = "ef" } }]

[[packages]]
name = "attrs"
vcs = { type = "git", url = "https://github.com/python-attrs/attrs", requested-revision = "main", commit-id = "0123456789abcdef0123456789abcdef01234567", subdirectory = "src" }

[[packages]]
name = "tiny"
archive = { url = "https://example.org/tiny-1.0.tar.gz", hashes = { sha256 = "01" } }

[[packages]]
name = "locallib"
directory = { path = "libs/locallib", editable = true }

[[packages]]
name = "localwheel"
version = "3.0"
wheels = [{ path = "wheels/localwheel-3.0-py3-none-any.whl", hashes = { sha256 = "02" } }]

[[packages]]
name = "onlysdist"
version = "0.1"
sdist = { url = "https://files.pythonhosted.org/packages/onlysdist-0.1.tar.gz", hashes = { sha256 = "06" } }

[[packages]]
name = "elsewhere"
version = "0.2"
sdist = { url = "https://example.org/dist/elsewhere-0.2.tar.gz", hashes = { sha256 = "07" } }

[[packages]]
name = "sphinx"
version = "8.0.0"
marker = "'docs' in dependency_groups"
index = "https://pypi.org/simple"
wheels = [{ url = "https://files.pythonhosted.org/packages/sphinx-8.0.0-py3-none-any.whl", hashes = { sha256 = "03" } }]

[[packages]]
name = "pytest"
version = "8.3.0"
marker = "'dev' in dependency_groups"
index = "https://pypi.org/simple"
wheels = [{ url = "https://files.pythonhosted.org/packages/pytest-8.3.0-py3-none-any.whl", hashes = { sha256 = "04" } }]

[[packages]]
name = "pywin32"
version = "306"
marker = "sys_platform == 'win32' and 'docs' in dependency_groups"
index = "https://pypi.org/simple"
wheels = [{ url = "https://files.pythonhosted.org/packages/pywin32-306-cp311-cp311-win_amd64.whl", hashes = { sha256 = "05" } }]
"""


def test_pylock_each_package_is_one_line_its_marker_kept(repo):
    folder = repo / "repo"
    (folder / "libs" / "locallib").mkdir(parents=True)
    (folder / "wheels").mkdir()
    (folder / "wheels" / "localwheel-3.0-py3-none-any.whl").write_bytes(make_wheel("localwheel", "3.0", ""))
    (folder / "pylock.toml").write_text(PYLOCK)
    r = collect(repo)
    real = folder.resolve()
    assert r.display_lines == [
        "--extra-index-url https://download.pytorch.org/whl/cpu",  # another index beside PyPI
        "six==1.17.0",
        "colorama==0.4.6 ; sys_platform == 'win32'",
        "torch==2.5.1+cpu ; python_version >= '3.10'",
        "attrs @ git+https://github.com/python-attrs/attrs@0123456789abcdef0123456789abcdef01234567#subdirectory=src",
        "tiny @ https://example.org/tiny-1.0.tar.gz",
        f"locallib @ file://{real}/libs/locallib",  # confined, hashed; installed as a regular install
        f"localwheel @ file://{real}/wheels/localwheel-3.0-py3-none-any.whl",  # the one file the lock names
        "onlysdist==0.1",  # on PyPI
        "elsewhere @ https://example.org/dist/elsewhere-0.2.tar.gz",  # the one file, not on PyPI
        "sphinx==8.0.0",  # 'docs' is a default group: installed, no marker left
        'pywin32==306 ; sys_platform == \'win32\' and python_version >= "0"',  # the platform still decides
    ]  # pytest: only in the dev group, which is not a default group
    assert r.local_paths == [f"{real}/libs/locallib", f"{real}/wheels/localwheel-3.0-py3-none-any.whl"]
    assert r.origin == ("pylock.toml at the repository root (repo/pylock.toml: 11 locked packages; 1 left out (only "
                        "in extras or groups not installed by default); index https://download.pytorch.org/whl/cpu)")
    assert r.python_requires == (">=3.10", "repo/pylock.toml's requires-python")
    assert r.supported_environments is None and r.project_file is None
    assert r.source_path == str(folder / "pylock.toml")
    assert requirements_sentence(r.count, r.origin).startswith("11 requirements from pylock.toml at the repository")


def test_pylock_from_one_other_index_replaces_the_default_and_a_local_index_is_find_links(repo):
    folder = repo / "repo"
    (folder / "wheels").mkdir()
    (folder / "pylock.toml").write_text(
        'lock-version = "1.0"\n'
        '[[packages]]\nname = "torch"\nversion = "2.5.1"\nindex = "https://user:TOKEN@download.example/simple"\n'
        'wheels = [{ url = "https://download.example/torch-2.5.1-py3-none-any.whl" }]\n')
    r = collect(repo)
    assert r.display_lines == ["--index-url https://user:***@download.example/simple", "torch==2.5.1"]
    assert r.secrets == ["TOKEN"] and "TOKEN" not in r.origin and "TOKEN" not in json.dumps(r.cache_key_material())
    assert r.origin.endswith("index https://user:***@download.example/simple)")
    # as `uv export --format pylock.toml` writes a --find-links folder: a file:// index
    (folder / "pylock.toml").write_text(
        f'lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1.0"\nindex = "file://{folder}/wheels"\n'
        f'wheels = [{{ url = "file://{folder}/wheels/a-1.0-py3-none-any.whl" }}]\n')
    assert collect(repo).display_lines == [f"--find-links {folder.resolve()}/wheels", "a==1.0"]


def test_pylock_comes_after_environment_yml_and_before_the_other_files_binder_too(repo):
    folder = repo / "repo"
    lock = 'lock-version = "1.0"\n[[packages]]\nname = "six"\nversion = "1.17.0"\nindex = "https://pypi.org/simple"\n' \
           'wheels = [{ url = "https://files.pythonhosted.org/six-1.17.0-py2.py3-none-any.whl" }]\n'
    for name in ("requirements.txt", "Pipfile"):
        (folder / name).write_text("tabulate\n" if name == "requirements.txt" else '[packages]\ntabulate = "*"\n')
    (folder / "Pipfile.lock").write_text(json.dumps({"default": {"tabulate": {"version": "==0.9.0"}}}))
    (folder / "pylock.toml").write_text(lock)
    (folder / "pylock.docs.toml").write_text("not read: named lock files are not picked\n")
    assert collect(repo).display_lines == ["six==1.17.0"]
    (folder / "environment.yml").write_text("dependencies:\n  - numpy=1.26\n")
    assert collect(repo).display_lines == ["numpy==1.26.*"]
    (folder / "binder").mkdir()
    (folder / "binder" / "requirements.txt").write_text("tabulate\n")
    (folder / "binder" / "pylock.toml").write_text(lock)
    r = collect(repo)
    assert (r.display_lines, r.origin) == (["six==1.17.0"], "repo/binder/pylock.toml (the repository's binder "
                                                            "folder: 1 locked package)")


@pytest.mark.parametrize("text, reason", [
    ("[[packages]\n", "pylock.toml at the repository root (repo/pylock.toml): is not valid TOML"),
    ('lock-version = "2.0"\npackages = []\n', "pylock.toml at the repository root (repo/pylock.toml): lock-version "
                                              "2.0 is not supported: this tool reads PEP 751 lock files of "
                                              "lock-version 1.x"),
    ("packages = []\n", "has no lock-version"),
    ('lock-version = 1\npackages = []\n', "lock-version 1 is not a version"),
    ('lock-version = "1.0"\n', "has no [[packages]]"),
    ('lock-version = "1.0"\npackages = [1]\n', "has no [[packages]]"),
    ('lock-version = "1.0"\n[[packages]]\nversion = "1"\n', "packages[0]: name is missing or not a package name"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1"\n',
     "packages[0] (a): names no source (one of vcs, directory, archive, or sdist/wheels)"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\ndirectory = { path = "." }\narchive = { url = "https://x/a.zip" }\n',
     "packages[0] (a): names more than one source (directory, archive)"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nvcs = { type = "git", url = "https://x/a" }\n',
     "packages[0] (a): vcs.commit-id is missing"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nvcs = { type = "cvs", url = "https://x/a", commit-id = "1" }\n',
     "vcs.type 'cvs' is not one of git, hg, svn, bzr"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nmarker = "python_version >>> \'3\'"\n'
     'archive = { url = "https://x/a.zip" }\n', "packages[0] (a): marker \"python_version >>> '3'\" is not an "
                                               "environment marker"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1"\nwheels = [{ url = "https://x/a-1-py3-none-any'
     '.whl" }, { url = "https://x/a-1-py2-none-any.whl" }]\n', "its 2 files are not on PyPI and the lock names no index"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nvcs = { type = "git", url = "ssh://git@x/a", commit-id = "1" }\n',
     "packages[0] (a): the git+ssh URL scheme is not accepted"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1 -r x"\nsdist = { url = "https://x/a-1.zip" }\n',
     "packages[0] (a): version '1 -r x' is not a version"),
    ('lock-version = "1.0"\n[[packages]]\nname = "a"\narchive = { url = "https://x/a.zip -r x" }\n',
     "packages[0] (a): archive.url 'https://x/a.zip -r x' is not a URL"),
    ('lock-version = "1.0"\nenvironments = ["sys_platform ="]\npackages = []\n',
     "environments: 'sys_platform =' is not an environment marker"),
])
def test_a_malformed_pylock_is_a_400_naming_it_and_the_reason(repo, text, reason):
    (repo / "repo" / "pylock.toml").write_text(text)
    e = refused(repo)
    assert "pylock.toml at the repository root (repo/pylock.toml)" in e.message and reason in e.message, e.message


def test_a_pylock_path_outside_the_server_root_is_refused(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x-1.0.tar.gz").write_bytes(b"OUTSIDE")
    for entry in ('directory = { path = "../../outside" }', 'archive = { path = "../../outside/x-1.0.tar.gz" }',
                  f'archive = {{ path = "{outside}/x-1.0.tar.gz" }}'):
        (repo / "repo" / "pylock.toml").write_text(f'lock-version = "1.0"\n[[packages]]\nname = "x"\n{entry}\n')
        e = refused(repo)
        assert e.message.startswith("pylock.toml at the repository root (repo/pylock.toml) packages[0] (x): the "
                                    "local path"), e.message
        assert "is outside the server root" in e.message


def test_pylock_environments_must_fit_the_build(repo):
    """PEP 751 environments: the lock is valid only there; the service refuses another at submit."""
    from jupyter_nbvalidation.service.errors import ApiError
    from jupyter_nbvalidation.service.jobs import JobService

    here = ".".join(map(str, sys.version_info[:3]))
    (repo / "repo" / "pylock.toml").write_text('lock-version = "1.0"\nenvironments = ["sys_platform == \'nope\'", '
                                               '"python_version < \'3\'"]\npackages = []\n')
    r = collect(repo)
    assert r.supported_environments == (["sys_platform == 'nope'", "python_version < '3'"],
                                        "repo/pylock.toml's environments")
    service = SimpleNamespace(backend=SimpleNamespace(build_python_version=lambda: here))
    with pytest.raises(ApiError) as e:
        JobService._check_supported_environments(service, r)  # type: ignore[arg-type]
    assert e.value.status == 400 and "repo/pylock.toml's environments lists the environments the lock is valid " \
                                      "for (sys_platform == 'nope'; python_version < '3')" in str(e.value.message)
    assert lock_files.environments_fit([f"sys_platform == '{sys.platform}'"], here)
    assert not lock_files.environments_fit(["python_version >= '3.12'"], "3.11.7")
    assert lock_files.environments_fit(["python_version >= '3.12'"], "3.12.1")
    service = SimpleNamespace(backend=SimpleNamespace(build_python_version=lambda: None))  # not known: not checked
    JobService._check_supported_environments(service, r)  # type: ignore[arg-type]


# --- uv.lock -----------------------------------------------------------------------------------

UV = ef.uv_binary()


def uv_project(folder: Path, dependencies: str, *, packaged: bool = False, extra: str = "") -> None:
    """A uv project in ``folder`` locked (`uv lock --offline`) from the wheels in ``folder/wheels``."""
    (folder / "pyproject.toml").write_text(
        (('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
          '[tool.setuptools]\npackages = ["demo"]\n') if packaged else "")
        + f'[project]\nname = "demo"\nversion = "0.1"\nrequires-python = ">=3.11"\ndependencies = [{dependencies}]\n'
        + '[tool.uv]\nfind-links = ["wheels"]\nno-index = true\n' + extra)
    lock(folder)


def lock(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    proc = subprocess.run([UV, "lock", "--offline", "--no-cache", "--python", sys.executable], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def wheels(folder: Path, *versions: tuple[str, str]) -> None:
    (folder / "wheels").mkdir(exist_ok=True)
    for name, version in versions:
        (folder / "wheels" / f"{name}-{version}-py3-none-any.whl").write_bytes(
            make_wheel(name, version, f"__version__ = {version!r}\n"))


def test_uv_lock_is_exported_by_uv_with_its_find_links_folder(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"), ("nbvlockb", "1.5"))
    uv_project(folder, '"nbvlocka", "nbvlockb ; sys_platform == \'nope\'"')
    wheels(folder, ("nbvlocka", "2.0"))  # newer than the lock: not what is installed
    r = collect(repo)
    real = folder.resolve()
    assert r.display_lines == [f"--find-links {real}/wheels", "nbvlocka==1.0", "nbvlockb==1.5 ; sys_platform == 'nope'"]
    assert r.local_paths == [f"{real}/wheels"]  # the folder's content is in the cache key
    assert r.origin == "uv.lock at the repository root (repo/uv.lock: 2 locked packages)"
    assert r.project_file is None  # a virtual project (no [build-system]): not installed, as uv does
    assert r.python_requires == (">=3.11", "repo/pyproject.toml's requires-python")
    assert r.source_path == str(folder / "uv.lock")


def test_uv_lock_comes_after_pylock_and_before_pipfile_and_requirements(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"))
    uv_project(folder, '"nbvlocka"')
    (folder / "requirements.txt").write_text("tabulate\n")
    (folder / "Pipfile.lock").write_text(json.dumps({"default": {"tabulate": {"version": "==0.9.0"}}}))
    assert collect(repo).display_lines[-1] == "nbvlocka==1.0"
    (folder / "pylock.toml").write_text('lock-version = "1.0"\npackages = []\n')
    assert collect(repo).origin == "pylock.toml at the repository root (repo/pylock.toml: 0 locked packages)"


def test_uv_lock_of_a_packaged_project_installs_the_project_too(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"))
    (folder / "demo").mkdir()
    (folder / "demo" / "__init__.py").write_text("import nbvlocka\n")
    uv_project(folder, '"nbvlocka"', packaged=True)
    r = collect(repo)
    real = str(folder.resolve())
    assert r.display_lines == [f"--find-links {real}/wheels", "nbvlocka==1.0", real]
    assert r.project_file == "repo/pyproject.toml"
    assert r.origin == ("uv.lock at the repository root (repo/uv.lock: 1 locked package and the project demo, "
                        "installed from repo)")
    # the project's tree is in the cache key, uv.lock with it
    key = r.cache_key_material()
    (folder / "uv.lock").write_text((folder / "uv.lock").read_text() + "\n")
    assert collect(repo).cache_key_material() != key


def test_the_cache_key_follows_what_uv_lock_installs(repo):
    """A virtual project: the key is the exported lines (and the find-links folder). A lock
    change that exports the same lines (a dev group added) installs the same packages: the same
    key; a change of a locked version: another key."""
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"), ("nbvlocka", "2.0"), ("nbvlockb", "1.5"))
    uv_project(folder, '"nbvlocka<2"')
    before = collect(repo).cache_key_material()
    text = (folder / "uv.lock").read_text()
    uv_project(folder, '"nbvlocka<2"', extra='[dependency-groups]\ndev = ["nbvlockb"]\n')
    assert (folder / "uv.lock").read_text() != text  # the lock changed ...
    assert collect(repo).cache_key_material() == before  # ... what it installs did not
    uv_project(folder, '"nbvlocka>=2"', extra='[dependency-groups]\ndev = ["nbvlockb"]\n')
    r = collect(repo)
    assert "nbvlocka==2.0" in r.display_lines and r.cache_key_material() != before


def test_uv_lock_default_groups_but_dev_are_installed(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"), ("nbvlockb", "1.5"))
    uv_project(folder, "", extra='default-groups = ["dev", "docs"]\n[dependency-groups]\ndev = ["nbvlocka"]\n'
                                 'docs = ["nbvlockb"]\n')
    assert collect(repo).display_lines[1:] == ["nbvlockb==1.5"]


def test_a_corrupt_or_out_of_date_uv_lock_is_a_400_with_uvs_error(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"), ("nbvlocka", "2.0"))
    uv_project(folder, '"nbvlocka<2"')
    good = (folder / "uv.lock").read_text()
    where = "uv.lock at the repository root (repo/uv.lock)"
    # a dependency changed in pyproject.toml since: --frozen would export the old lock as it is
    pyproject = (folder / "pyproject.toml").read_text()
    (folder / "pyproject.toml").write_text(pyproject.replace('"nbvlocka<2"', '"nbvlocka>=2"'))
    e = refused(repo)
    assert e.message == (f"{where}: is out of date with the pyproject.toml beside it (pyproject.toml declares "
                         "nbvlocka>=2; uv.lock locked nbvlocka<2): `uv sync` would lock again; run `uv lock` and "
                         "commit uv.lock")
    (folder / "pyproject.toml").write_text(pyproject.replace('"nbvlocka<2"', '"nbvlocka<2", "nbvlockc"'))
    assert "(pyproject.toml declares nbvlockc)" in refused(repo).message
    # the project is not the lock's: uv's own message
    (folder / "pyproject.toml").write_text(pyproject.replace('name = "demo"', 'name = "renamed"'))
    e = refused(repo)
    assert e.message.startswith(f"{where}: uv cannot export it: The lockfile at `uv.lock` needs to be updated, but "
                                "`--frozen` was provided"), e.message
    (folder / "pyproject.toml").write_text(pyproject)
    # not TOML: uv's first error line and its cause, never a traceback
    (folder / "uv.lock").write_text(good + "garbage [[\n")
    e = refused(repo)
    assert e.message.startswith(f"{where}: uv cannot export it: Failed to parse `uv.lock`: TOML parse error at "
                                "line "), e.message
    assert "Traceback" not in e.message and "\n" not in e.message
    (folder / "uv.lock").write_text(good.replace("version = 1\n", "version = 99\n", 1))
    assert "unsupported schema version (v99" in refused(repo).message
    # without the pyproject.toml uv reads it with
    (folder / "uv.lock").write_text(good)
    (folder / "pyproject.toml").unlink()
    assert refused(repo).message == (f"{where}: has no pyproject.toml beside it; uv reads a lock with its project "
                                     "(declare a folder without one in pylock.toml or requirements.txt)")


def test_an_up_to_date_lock_is_not_taken_for_an_out_of_date_one(repo):
    """uv records no specifier for a path source and one entry per marker of a split source: the
    comparison with pyproject.toml does not take those for changes."""
    folder = repo / "repo"
    (folder / "libs" / "sub").mkdir(parents=True)
    (folder / "libs" / "sub" / "pyproject.toml").write_text(
        '[project]\nname = "sub"\nversion = "0.2"\n[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n')
    wheels(folder, ("nbvlocka", "1.0"), ("nbvlockb", "1.5"))
    uv_project(folder, '"sub>=0.1", "nbvlocka >= 1.0.0", "nbvlockb ; sys_platform == \'linux\'", '
                       '"nbvlockb ; sys_platform == \'darwin\'"',
               extra='[tool.uv.sources]\nsub = [{ path = "libs/sub", marker = "sys_platform == \'linux\'" }, '
                     '{ path = "libs/sub", marker = "sys_platform != \'linux\'" }]\n'
                     '[project.optional-dependencies]\nextra = ["nbvlockb>=1"]\n')
    r = collect(repo)
    real = folder.resolve()
    assert r.display_lines == [f"--find-links {real}/wheels", f"{real}/libs/sub", "nbvlocka==1.0",
                               "nbvlockb==1.5 ; sys_platform == 'darwin' or sys_platform == 'linux'"]
    assert r.origin == "uv.lock at the repository root (repo/uv.lock: 3 locked packages)"


def test_uv_lock_lines_go_through_the_same_checks(repo, tmp_path):
    """A path dependency outside the server root, exported by uv, is refused like any local path."""
    folder = repo / "repo"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "pyproject.toml").write_text('[project]\nname = "far"\nversion = "1"\n[build-system]\n'
                                            'requires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n')
    wheels(folder, ("nbvlocka", "1.0"))
    uv_project(folder, '"far"', extra=f'[tool.uv.sources]\nfar = {{ path = "{outside}" }}\n')
    e = refused(repo)
    assert e.message.startswith("uv.lock at the repository root (repo/uv.lock) exported line 1: the local path"), \
        e.message
    assert "is outside the server root" in e.message


def test_uv_lock_supported_markers_are_checked_like_pylock_environments(repo):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"))
    uv_project(folder, '"nbvlocka"', extra="environments = [\"sys_platform == 'nope'\"]\n")
    r = collect(repo)
    assert r.display_lines[1:] == ["nbvlocka==1.0 ; sys_platform == 'nope'"]  # would install nothing here ...
    assert r.supported_environments == (["sys_platform == 'nope'"], "repo/uv.lock's supported-markers")  # refused


def test_uv_export_is_bounded_in_time(repo, monkeypatch):
    folder = repo / "repo"
    wheels(folder, ("nbvlocka", "1.0"))
    uv_project(folder, '"nbvlocka"')
    monkeypatch.setattr(ef, "UV_EXPORT_TIMEOUT", 0.001)
    assert refused(repo).message == "uv.lock at the repository root (repo/uv.lock): `uv export` did not finish " \
                                    "within 0.001 s"


def test_uvs_error_line_and_masked_credentials():
    stderr = ("warning: something\nerror: Failed to fetch `https://user:S3CRET@host/simple/x`\n"
              "  cause: HTTP status 401 from https://T0KEN@host/simple\n  cause: more\n  cause: and more\n")
    text = mask_urls(ef._uv_error(stderr, 2))
    assert text == "Failed to fetch `https://user:***@host/simple/x`: HTTP status 401 from https://***@host/simple: more"
    assert ef._uv_error("thread 'main' panicked at src/x.rs:1:1:\nboom\n", 101) == \
        "uv stopped with an internal error (a panic) reading it"
    assert ef._uv_error("", 3) == "uv export exited with status 3"


# --- real runs through `jupyter nbvalidation run` -------------------------------------------------

def test_run_a_uv_project_installs_the_locked_version(tmp_path):
    """A uv project locked at nbvlocka 1.0 while its --find-links folder now also holds 2.0: the
    build installs 1.0 (a notebook cell checks it), and the origin names uv.lock."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    wheels(repo, ("nbvlocka", "1.0"))
    uv_project(repo, '"nbvlocka"')
    wheels(repo, ("nbvlocka", "2.0"))  # an unlocked install would take this one
    write_notebook(repo / "notebooks" / "nb.ipynb", ["import nbvlocka\nprint(nbvlocka.__version__)\n"
                                                     "assert nbvlocka.__version__ == '1.0', nbvlocka.__version__"])
    _, row = run(tmp_path)
    assert row["verdict"] == "Succeeded", row
    assert building(tmp_path, row["job"]) == ("Building the environment: 1 requirement from uv.lock at the "
                                              "repository root (repo/uv.lock: 1 locked package).")


def test_run_with_a_corrupt_uv_lock_or_a_lock_for_elsewhere_is_refused_and_creates_no_job(tmp_path):
    """A 400 at submit (`run` exits 2), nothing created: a uv.lock uv cannot read; a pylock.toml
    whose environments are not this machine's."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    wheels(repo, ("nbvlocka", "1.0"))
    uv_project(repo, '"nbvlocka"')
    (repo / "uv.lock").write_text((repo / "uv.lock").read_text() + "[[package]]\nname = \n")
    write_notebook(repo / "nb.ipynb", ["print(1)"])
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-rt")}

    def refused_run() -> str:
        proc = cli("run", "repo", "--local", "--data-dir", str(tmp_path / "data"), "-o", "json", cwd=tmp_path,
                   timeout=300, env=env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        [row] = json.loads(proc.stdout)
        assert row["verdict"] == "Refused", row
        return str(row["firstFailure"])

    failure = refused_run()
    assert "uv.lock beside the notebook (repo/uv.lock): uv cannot export it: Failed to parse `uv.lock`" in failure
    (repo / "pylock.toml").write_text('lock-version = "1.0"\nenvironments = ["sys_platform == \'nope\'"]\n'
                                      'packages = []\n')
    assert "repo/pylock.toml's environments lists the environments the lock is valid for (sys_platform == " \
           "'nope'); environments here (Python " in refused_run()
    listed = cli("list", "--local", "--data-dir", str(tmp_path / "data"), "-o", "json", cwd=tmp_path, timeout=120,
                 env=env)
    assert json.loads(listed.stdout)["items"] == []


def test_uvs_error_is_read_whole_when_uv_wraps_it():
    from jupyter_nbvalidation.environment.kinds.uv_lock import _uv_error

    wrapped = ("warning: something first\nerror: The lockfile at `uv.lock` needs to be updated, but `--frozen` was\n"
               "provided\n  Caused by: TOML parse error at line 3,\n  column 1\n\nhint: run uv lock\n")
    assert _uv_error(wrapped, 2) == ("The lockfile at `uv.lock` needs to be updated, but `--frozen` was provided: "
                                     "TOML parse error at line 3, column 1")
    assert _uv_error("thread 'main' panicked at src/x.rs", 101) == \
        "uv stopped with an internal error (a panic) reading it"
    assert _uv_error("", 2) == "uv export exited with status 2"
