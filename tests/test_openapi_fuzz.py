"""The OpenAPI document checked against a running server by a property-based
fuzzer (schemathesis): no 5xx, every answer conforms to the document,
unauthenticated calls get 401, bad input is rejected.

`positive_data_acceptance` is excluded: a schema-valid request can still be
refused for what it refers to (a notebook that does not exist, a `continue`
token that was never issued), and those 4xx answers are the point."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from helpers import write_notebook


def _schemathesis(server, tmp_path, extra_config: str = "") -> subprocess.CompletedProcess:
    cfg = tmp_path / "schemathesis.toml"
    cfg.write_text(extra_config)
    st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    return subprocess.run(
        [st, "--config-file", str(cfg), "run", f"{server.url}nbvalidation/api/v1/openapi.json",
         "--wait-for-schema", "30", "-H", f"Authorization: token {server.token}",
         "--checks", "all", "--exclude-checks", "positive_data_acceptance",
         "--max-examples", "40", "--seed", "20261129", "--workers", "1", "--max-failures", "20"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_openapi_fuzz(server_proc, tmp_path):
    server = server_proc().start()
    write_notebook(server.root / "nb.ipynb", ["print('fuzz')"])
    api = server.client()
    job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"},
                                       "podConfig": {"buildConfig": {"enabled": False}}})
    name = job["metadata"]["name"]
    deadline = time.monotonic() + 120
    while api.request("GET", f"jobs/{name}")["status"].get("phase") not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline
        time.sleep(0.2)

    random_names = _schemathesis(server, tmp_path)
    assert random_names.returncode == 0, random_names.stdout[-6000:]
    assert "passed" in random_names.stdout
    existing = _schemathesis(server, tmp_path, f'[parameters]\n"path.name" = "{name}"\n')
    assert existing.returncode == 0, existing.stdout[-6000:]
    log = server.log_path.read_text()
    assert " 500 " not in log and "Traceback" not in log, log[-4000:]
