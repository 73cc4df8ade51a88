"""One composition root (issue 23): the CLI without a server reads the Jupyter config files a
server on this machine reads, so `c.NBValidation.*` and `c.LocalBackend.*` give the same verdict
in this process as through a server (before, the in-process CLI ignored them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers import write_notebook

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"


def test_the_cli_without_a_server_honours_the_servers_config(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({
        "NBValidation": {"validation_timeout": 4},
        "LocalBackend": {"data_dir": str(tmp_path / "configured-data")},
    }))
    write_notebook(tmp_path / "proj" / "slow.ipynb", ["import time; time.sleep(60)"])
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", "slow.ipynb", "--no-build", "--local", "-o", "json"],
                          cwd=tmp_path / "proj", capture_output=True, text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [result] = json.loads(proc.stdout)
    assert result["verdict"] == "Failed", result
    assert "did not finish within 4" in json.dumps(result), result
    # c.LocalBackend.data_dir is where the job went, as a server's would
    assert (tmp_path / "configured-data" / "nbvalidation.db").is_file()


def test_the_command_line_wins_over_the_config(tmp_path):
    from traitlets.config import Config

    from jupyter_nbvalidation.composition import local_service

    config = Config({"NBValidation": {"validation_timeout": 4.0, "max_input_files": 7},
                     "LocalBackend": {"data_dir": str(tmp_path / "configured"), "niceness": 5}})
    config.NBValidationSettings.merge(config.NBValidation)
    service = local_service(str(tmp_path), str(tmp_path / "given"), {"niceness": 0}, config=config)
    assert service.engine.validation_timeout == 4.0 and service.max_input_files == 7
    assert service.backend.data_dir == str(tmp_path / "given") and service.backend.niceness == 0
