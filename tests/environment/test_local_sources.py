"""The requirements' local paths packed to travel with a job (local_sources.py), and apt.txt's
packages (environment_files.read_apt_txt): what a Kubernetes build gets of the server's files."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

import jupyter_nbvalidation.environment.local_sources as local_sources
import jupyter_nbvalidation.environment.requirements as reqmod
from jupyter_nbvalidation.environment.kinds.apt_txt import read_apt_txt
from jupyter_nbvalidation.environment.requirements import RequirementsError
from jupyter_nbvalidation.environment.trees import tree_hash


def _project(root):
    proj = root / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "1"\n')
    (proj / "pkg" / "__init__.py").write_text("X = 1\n")
    (proj / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(proj / "run.sh", 0o755)
    (proj / "pkg" / "here").symlink_to("__init__.py")
    # what the cache key leaves out does not travel either
    (proj / "build").mkdir()
    (proj / "build" / "junk.py").write_text("")
    (proj / "pkg" / "__pycache__").mkdir()
    (proj / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (proj / ".venv").mkdir()
    (proj / "wheels").mkdir()
    (proj / "wheels" / "w-1-py3-none-any.whl").write_bytes(b"PK")
    return proj


def test_pack_holds_what_the_cache_key_hashes_and_is_deterministic(tmp_path):
    proj = _project(tmp_path)
    paths = [str(proj), str(proj / "wheels")]
    a, b = local_sources.pack(paths), local_sources.pack(list(reversed(paths)))
    assert a.data == b.data  # the same bytes for the same content
    assert a.places == {str(proj): "proj", str(proj / "wheels"): "proj/wheels"}
    assert a.hashes == {p: tree_hash(p) for p in paths}
    with tarfile.open(fileobj=io.BytesIO(a.data)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert "proj/pkg/__init__.py" in names and "proj/pyproject.toml" in names
    assert names["proj/run.sh"].mode == 0o755 and names["proj/pkg/__init__.py"].mode == 0o644
    assert names["proj/pkg/here"].issym() and names["proj/pkg/here"].linkname == "__init__.py"
    assert not [n for n in names if "build/" in n or "__pycache__" in n or ".venv" in n]
    assert all(m.mtime == 0 and m.uid == 0 for m in names.values())
    assert local_sources.read(a.data).places == a.places and local_sources.read(a.data).hashes == a.hashes
    (proj / "pkg" / "__init__.py").write_text("X = 2\n")
    assert local_sources.pack(paths).data != a.data


def test_pack_refuses_a_link_out_of_the_path_and_an_archive_over_the_bound(tmp_path):
    proj = _project(tmp_path)
    (proj / "pkg" / "out").symlink_to("/etc")
    with pytest.raises(local_sources.PackError) as e:
        local_sources.pack([str(proj)])
    assert e.value.status == 400 and "is a link to /etc" in str(e.value)
    (proj / "pkg" / "out").unlink()
    (proj / "pkg" / "up").symlink_to("../../elsewhere")
    with pytest.raises(local_sources.PackError):
        local_sources.pack([str(proj)])
    (proj / "pkg" / "up").unlink()
    (proj / "blob").write_bytes(os.urandom(local_sources.MAX_BYTES + 1))
    with pytest.raises(local_sources.PackError) as e:
        local_sources.pack([str(proj)])
    assert e.value.status == 413 and str(local_sources.MAX_BYTES) in str(e.value)


def test_relocate_rewrites_every_form_of_a_local_path_and_refuses_one_that_did_not_travel():
    places = {"/srv/r/proj": "proj", "/srv/r/proj/wheels": "proj/wheels", "/srv/r/a.whl": "a.whl"}
    lines = ["/srv/r/proj[numpy,xarray]", "--find-links /srv/r/proj/wheels", "pkg @ file:///srv/r/a.whl",
             "/srv/r/proj/sub ; python_version >= '3'", "six==1.16.0", "--index-url https://x.org/simple"]
    d = local_sources.BUILD_DIR
    assert local_sources.relocate(lines, places) == [
        f"{d}/proj[numpy,xarray]", f"--find-links {d}/proj/wheels", f"pkg @ file://{d}/a.whl",
        f"{d}/proj/sub ; python_version >= '3'", "six==1.16.0", "--index-url https://x.org/simple"]
    with pytest.raises(ValueError, match="did not travel"):
        local_sources.relocate(["/srv/r/other"], places)
    with pytest.raises(ValueError):  # a sibling whose name starts the same is another path
        local_sources.relocate(["/srv/r/project2"], places)


def test_requirements_carry_the_archive_and_its_hashes_into_the_snapshot_and_the_key(tmp_path):
    proj = _project(tmp_path)
    reqs = reqmod.Requirements(origin="x", lines=[str(proj)], display_lines=[str(proj)], local_paths=[str(proj)])
    unpacked_key = reqs.cache_key_material()
    reqs.packed = local_sources.pack(reqs.local_paths)
    assert reqs.snapshot()[local_sources.ARCHIVE] == reqs.packed.data
    assert reqs.cache_key_material() == unpacked_key
    (proj / "pkg" / "__init__.py").write_text("X = 3\n")  # the key is of what was packed, not of the live tree
    assert reqs.cache_key_material() == unpacked_key


def test_apt_txt_is_read_as_package_names_and_nothing_else(tmp_path):
    assert read_apt_txt(str(tmp_path), str(tmp_path)) is None
    (tmp_path / "apt.txt").write_text("# tools\njq graphviz  # two\n\nlibfoo1:amd64=1.2-3\njq\n")
    assert read_apt_txt(str(tmp_path), str(tmp_path)) == (["jq", "graphviz", "libfoo1:amd64=1.2-3"], "apt.txt")
    for bad in ["jq; rm -rf /", "$(id)", "-o=APT::x", "Upper"]:
        (tmp_path / "apt.txt").write_text(f"{bad}\n")
        with pytest.raises(RequirementsError) as e:
            read_apt_txt(str(tmp_path), str(tmp_path))
        assert "apt.txt line 1" in e.value.message and "not a Debian package name" in e.value.message


def test_a_discovered_environment_installs_apt_txt_only_where_the_backend_can(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("six\n")
    (tmp_path / "apt.txt").write_text("jq\n")
    nb = tmp_path / "nb.ipynb"
    nb.write_text("{}")
    spec = {"notebook": {"path": "nb.ipynb"}}
    here = reqmod.collect(spec, str(tmp_path), str(nb))
    assert here.system_packages == [] and "not run here: apt.txt (system packages)" in here.origin
    there = reqmod.collect(spec, str(tmp_path), str(nb), system_packages=True)
    assert there.system_packages == ["jq"] and "1 system package from apt.txt (jq)" in there.origin
    assert "not run here" not in there.origin
    assert there.snapshot()[reqmod.SYSTEM_PACKAGES_TXT] == b"jq\n"
    assert there.cache_key_material()["system"] == ["jq"] and "system" not in here.cache_key_material()


@pytest.mark.asyncio
async def test_the_image_recipe_carries_the_archive_and_apt_txt_and_its_tag_follows_their_content(tmp_path):
    """The Kubernetes build's inputs: the archive unpacked before the kernel's install, the lines
    pointing into it, apt.txt's packages installed first; the content tag (image reuse and the
    verdict cache's identity) changes with what was packed, as a fresh build would."""
    import logging

    import jupyter_nbvalidation.backends.kubernetes.objects as obj
    from jupyter_nbvalidation.backends.kubernetes.images import Images, ImageSettings

    digest = "sha256:" + "a" * 64
    images = Images(ImageSettings(registry="registry.test/nbv"), base_image=lambda job: f"base@{digest}",
                    notify=lambda name: None, log=logging.getLogger("test"))
    proj = _project(tmp_path)

    def reqs(system=()):
        r = reqmod.Requirements(origin="x", lines=[f"{proj}[numpy]"], display_lines=[f"{proj}[numpy]"],
                                local_paths=[str(proj)], system_packages=list(system))
        r.packed = local_sources.pack(r.local_paths)
        return r

    first = await images._recipe(f"base@{digest}", reqs())
    assert f"{local_sources.BUILD_DIR}/proj[numpy]" in first.requirements_txt and str(proj) not in first.requirements_txt
    assert first.context[local_sources.ARCHIVE] == reqs().packed.data
    assert f"tar -xzf /tmp/nbv-build/{local_sources.ARCHIVE}" in first.dockerfile and "apt-get" not in first.dockerfile
    assert first.dockerfile.index("tar -xzf") < first.dockerfile.index("-r /tmp/nbv-build/requirements.txt")
    assert await images._recipe(f"base@{digest}", reqs()) == first  # the same content, the same image
    with_apt = await images._recipe(f"base@{digest}", reqs(["jq"]))
    assert with_apt.context["apt.txt"] == b"jq\n" and "xargs -a /tmp/nbv-build/apt.txt apt-get" in with_apt.dockerfile
    assert with_apt.dockerfile.index("apt-get") < with_apt.dockerfile.index("python3 -m venv")
    assert with_apt.tag != first.tag
    constrained = reqs()
    constrained.display_constraints = constrained.constraints = ["numpy==2.2.6"]
    pinned = await images._recipe(f"base@{digest}", constrained)
    assert pinned.context["constraints.txt"] == b"numpy==2.2.6\n" and "constraints.txt" not in first.context
    assert "-r /tmp/nbv-build/requirements.txt -c /tmp/nbv-build/constraints.txt;" in pinned.dockerfile
    assert " constraints.txt /tmp/nbv-build/" in pinned.dockerfile.split("COPY ", 1)[1].split("\n", 1)[0]
    assert "-c /tmp/nbv-build" not in first.dockerfile and pinned.tag != first.tag  # pins: another image
    (proj / "pkg" / "__init__.py").write_text("X = 9\n")
    assert (await images._recipe(f"base@{digest}", reqs())).tag != first.tag
    assert "Dockerfile" in obj.build_context("", "", "")
    unpacked = reqmod.Requirements(origin="x", lines=[str(proj)], display_lines=[str(proj)], local_paths=[str(proj)])
    from jupyter_nbvalidation.core.errors import InputRejected
    with pytest.raises(InputRejected, match="did not travel"):
        await images._recipe(f"base@{digest}", unpacked)


def test_the_servers_own_folders_never_travel(tmp_path):
    """A packed project that holds the server's runtime dir (its token files) or a kubeconfig: they
    are left out (Backend.private_paths); packing a private folder itself is refused."""
    proj = _project(tmp_path)
    runtime = proj / ".local" / "share" / "jupyter" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "jpserver-1.json").write_text('{"token": "s3cret"}')
    (proj / "kubeconfig").write_text("token: s3cret\n")
    private = frozenset({str(runtime.parent.parent), str(proj / "kubeconfig")})
    packed = local_sources.pack([str(proj)], private)
    with tarfile.open(fileobj=io.BytesIO(packed.data)) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert not [n for n in names if "jupyter" in n or "kubeconfig" in n] and b"s3cret" not in blob
    assert "proj/pkg/__init__.py" in names
    with pytest.raises(local_sources.PackError, match="never travels"):
        local_sources.pack([str(runtime)], private)
