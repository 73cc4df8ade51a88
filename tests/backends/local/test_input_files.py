"""spec.inputFiles on the local backend, through a real Jupyter server: the
named files are snapshotted at submit and the kernel works among that
snapshot (an edit after submit is not seen); bad patterns and limits are a
400 at submit that creates nothing."""

from __future__ import annotations

import json

import pytest
from helpers import cell_outputs as outputs
from helpers import rest_call as call
from helpers import rest_wait_terminal, write_notebook
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}



async def wait_terminal(jp_fetch, name, timeout=240):
    return await rest_wait_terminal(jp_fetch, name, timeout)


async def test_the_validation_sees_the_submit_time_snapshot(jp_fetch, jp_root_dir, tmp_path):
    flag = jp_root_dir / "go"  # in the root: the kernel's sandbox hides /tmp outside it
    write_notebook(jp_root_dir / "proj" / "nb.ipynb", [
        # wait until the test has edited the files beside the notebook
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)",
        "print(open('data.csv').read().strip())",
        "print(open('sub/more.txt').read().strip())",
        "print(os.path.exists('unnamed.txt'))",
    ])
    (jp_root_dir / "proj" / "data.csv").write_text("a,b\n1,2\n")
    (jp_root_dir / "proj" / "sub").mkdir()
    (jp_root_dir / "proj" / "sub" / "more.txt").write_text("more v1\n")
    (jp_root_dir / "proj" / "unnamed.txt").write_text("not named\n")
    job = await call(jp_fetch, "jobs", method="POST", body={
        "notebook": {"path": "proj/nb.ipynb"}, "inputFiles": ["*.csv", "sub/**"], **NOBUILD})
    (jp_root_dir / "proj" / "data.csv").write_text("edited,after\nsubmit,!\n")
    (jp_root_dir / "proj" / "sub" / "more.txt").write_text("more v2\n")
    flag.write_text("go")
    done = await wait_terminal(jp_fetch, job["metadata"]["name"])
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    nb = await call(jp_fetch, "jobs", job["metadata"]["name"], "notebook")
    assert outputs(nb) == ["a,b\n1,2\n", "more v1\n", "False\n"]


async def test_a_notebook_reading_a_file_beside_it_needs_it_named(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "d" / "nb.ipynb", ["print(open('data.csv').read())"])
    (jp_root_dir / "d" / "data.csv").write_text("x\n")
    named = await call(jp_fetch, "jobs", method="POST", body={
        "notebook": {"path": "d/nb.ipynb"}, "inputFiles": ["data.csv"], **NOBUILD})
    done = await wait_terminal(jp_fetch, named["metadata"]["name"])
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    other = await call(jp_fetch, "jobs", method="POST", body={
        "notebook": {"path": "d/nb.ipynb"}, "inputFiles": ["nb.ipynb"], **NOBUILD})
    done = await wait_terminal(jp_fetch, other["metadata"]["name"])
    assert done["status"]["phase"] == Phase.FAILED and "FileNotFoundError" in json.dumps(done["status"])
    # the message says what travelled: only the files inputFiles named
    message = done["status"]["message"]
    assert message.startswith("Cell 1 raised FileNotFoundError"), message
    assert "only the files spec.inputFiles named (nb.ipynb: 1 file" in message, message
    assert "add 'data.csv' to inputFiles" in message, message
    # without inputFiles the folder is there (a copy of it), and a file that is not says so
    write_notebook(jp_root_dir / "d" / "nb2.ipynb", ["print(open('data.csv').read())",
                                                    "open('../d/nothing-here.csv')"])
    folder = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "d/nb2.ipynb"}, **NOBUILD})
    done = await wait_terminal(jp_fetch, folder["metadata"]["name"])
    message = done["status"]["message"]
    assert done["status"]["phase"] == Phase.FAILED and done["status"]["failedCellIndex"] == 1, done["status"]
    assert "a copy of the notebook's folder (d) made when the run started" in message, message
    assert "'../d/nothing-here.csv' was not there" in message, message


@pytest.mark.parametrize("patterns,limits,field,words", [
    (["../secret.txt"], {}, "spec.inputFiles[0]", "no '..'"),
    (["/etc/passwd"], {}, "spec.inputFiles[0]", "relative to the notebook's folder"),
    (["link.txt"], {}, "spec.inputFiles[0]", "resolves outside the server root"),
    (["linkdir/*"], {}, "spec.inputFiles[0]", "resolves outside the server root"),
    (["*.nothing"], {}, "spec.inputFiles[0]", "matches no file"),
    (["many/*"], {"max_input_files": 3}, "spec.inputFiles", "the limit is 3"),
    (["big.bin"], {"max_input_bytes": 1000}, "spec.inputFiles", "over 1000 bytes"),
    (["x"] * 101, {}, "spec.inputFiles", "the limit is 100"),
])
async def test_bad_input_files_are_refused_and_create_nothing(jp_fetch, jp_serverapp, jp_root_dir, tmp_path,
                                                             patterns, limits, field, words):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("OUTSIDE-MARKER\n")
    write_notebook(jp_root_dir / "q" / "nb.ipynb", ["print(1)"])
    (jp_root_dir / "secret.txt").write_text("beside the folder\n")
    (jp_root_dir / "q" / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (jp_root_dir / "q" / "linkdir").symlink_to(tmp_path / "outside")
    (jp_root_dir / "q" / "many").mkdir()
    for i in range(5):
        (jp_root_dir / "q" / "many" / f"{i}.txt").write_text(str(i))
    (jp_root_dir / "q" / "big.bin").write_bytes(b"\0" * 1001)
    service = jp_serverapp.web_app.settings["nbvalidation_service"]
    for k, v in limits.items():
        setattr(service, k, v)
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "q/nb.ipynb"}, "inputFiles": patterns,
                                                          **NOBUILD})
    err = json.loads(e.value.response.body)["error"]
    assert e.value.code == 400, err
    assert err["field"] == field and words in err["message"], err
    assert "OUTSIDE-MARKER" not in err["message"]
    assert (await call(jp_fetch, "jobs"))["items"] == []
    jobs = service.backend.root / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())
