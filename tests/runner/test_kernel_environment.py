"""What a kernel is given of a job's variables: never one that changes how its interpreter
or the dynamic loader starts, even where the spec check was passed by (the runner's own
``--kernel-env``), and never the runner's own."""

from __future__ import annotations

import sys

import pytest

from jupyter_nbvalidation.runner.environment import kernel_environment
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec
from jupyter_nbvalidation.verdict.inherited import hijacks

REFUSED = ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT",
           "NBVALIDATION_RUN_ID", "NBVALIDATION_ANYTHING", "JPY_PARENT_PID"]


@pytest.mark.parametrize("name", REFUSED)
def test_the_kernel_never_gets_a_loader_or_interpreter_variable_from_a_job(tmp_path, name):
    env = kernel_environment(sys.executable, str(tmp_path), "run-1",
                             extra={name: "/tmp/evil.so", "MY_SETTING": "kept"}, source={})
    assert env["MY_SETTING"] == "kept"
    assert env.get(name) != "/tmp/evil.so"
    assert env["NBVALIDATION_RUN_ID"] == "run-1"


@pytest.mark.parametrize("name", REFUSED)
def test_the_spec_check_refuses_them_naming_the_variable(name):
    with pytest.raises(SpecError) as e:
        validate_spec({"notebook": {"path": "nb.ipynb"}, "podConfig": {"env": [{"name": name, "value": "x"}]}})
    assert e.value.field == "podConfig.env[0].name" and name in str(e.value)


@pytest.mark.parametrize("name", ["PYTHONPATH", "MPLBACKEND", "OMP_NUM_THREADS", "LDFLAGS", "MY_LD_PRELOAD"])
def test_ordinary_variables_are_kept(name):
    assert not hijacks(name)
