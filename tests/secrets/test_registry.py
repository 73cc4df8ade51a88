"""The secret registry (docs/secrets.md): its config checked at start, who may use a name, and its
values read from the server's environment or a file, with errors that never hold a value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traitlets import TraitError

from jupyter_nbvalidation.composition import NBValidationSettings
from jupyter_nbvalidation.secrets.registry import NOT_AVAILABLE, Caller, SecretNotAvailable, SecretRegistry

ALICE = Caller("alice", frozenset({"analysts"}))
BOB = Caller("bob", frozenset({"interns"}))


def test_permissions_and_one_answer_for_unknown_and_not_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = SecretRegistry({
        "mine": {"fromEnv": {"K": "MINE_VAR"}},
        "alices": {"fromEnv": {"K": "A_VAR"}, "users": ["alice"]},
        "team": {"fromEnv": {"K": "T_VAR"}, "groups": ["analysts"]},
    })
    assert reg.names() == ["alices", "mine", "team"]
    for name in reg.names():
        reg.check(name, Caller())  # the server's own user
    reg.check("alices", ALICE)
    reg.check("team", ALICE)
    answers = []
    for name, caller in (("mine", ALICE), ("alices", BOB), ("team", BOB), ("nosuch", BOB), ("nosuch", Caller())):
        with pytest.raises(SecretNotAvailable) as e:
            reg.check(name, caller)
        assert e.value.name == name and e.value.reason == NOT_AVAILABLE
        answers.append(str(e.value).replace(repr(name), "NAME"))
    assert len(set(answers)) == 1, answers


def test_from_secret_names_a_kubernetes_secret_whose_values_only_that_backend_reads() -> None:
    reg = SecretRegistry({"wh": {"fromSecret": "warehouse-creds", "users": ["alice"]},
                          "e": {"fromEnv": {"K": "HOME"}}})
    assert reg.kubernetes_secret("wh") == "warehouse-creds" and reg.kubernetes_secret("e") is None
    assert reg.kubernetes_secret("nosuch") is None
    reg.check("wh", ALICE)
    with pytest.raises(SecretNotAvailable, match="only the kubernetes backend reads"):
        reg.values("wh")
    for bad, text in (({"fromSecret": "Not_A_Name"}, "fromSecret"), ({"fromSecret": 3}, "fromSecret"),
                      ({"fromSecret": "x", "fromEnv": {"K": "HOME"}}, "exactly one")):
        with pytest.raises(ValueError, match=text):
            SecretRegistry({"bad": bad})


def test_values_from_env_and_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / "w.env"
    env_file.write_text("# a comment\nexport USER=svc\nPASSWORD='p=ss word'\n\nTOKEN=\"t0k\"\n")
    json_file = tmp_path / "w.json"
    json_file.write_text(json.dumps({"username": "u", "token": "s3cr3t"}))
    reg = SecretRegistry({"e": {"fromEnv": {"DB_PASSWORD": "NBV_TEST_PW"}}, "f": {"fromFile": str(env_file)},
                          "j": {"fromFile": str(json_file)}, "gone": {"fromFile": str(tmp_path / "nope")}})
    monkeypatch.setenv("NBV_TEST_PW", "hunter2")
    assert reg.values("e") == {"DB_PASSWORD": "hunter2"}
    assert reg.values("f") == {"USER": "svc", "PASSWORD": "p=ss word", "TOKEN": "t0k"}
    assert reg.values("j") == {"username": "u", "token": "s3cr3t"}
    monkeypatch.setenv("NBV_TEST_PW", "changed")  # read at each call, never kept
    assert reg.values("e") == {"DB_PASSWORD": "changed"}
    monkeypatch.delenv("NBV_TEST_PW")
    with pytest.raises(SecretNotAvailable, match="NBV_TEST_PW"):
        reg.values("e")
    with pytest.raises(SecretNotAvailable, match="cannot be read"):
        reg.values("gone")
    env_file.write_text("GOOD=fine\nthis line holds hunter2 and no equals sign\n")
    with pytest.raises(SecretNotAvailable) as e:
        reg.values("f")
    assert "line 2" in str(e.value) and "hunter2" not in str(e.value)


@pytest.mark.parametrize(("config", "says"), [
    ({"x": {}}, "exactly one of 'fromEnv'"),
    ({"x": {"fromEnv": {"K": "V"}, "fromFile": "/f"}}, "exactly one"),
    ({"x": {"fromEnv": {"K": "V"}, "user": ["a"]}}, "['x']['user']: unknown field"),
    ({"x": {"fromEnv": {"K": "1BAD"}}}, "not an environment variable's name"),
    ({"x": {"fromEnv": {"K K": "V"}}}, "key 'K K'"),
    ({"x": {"fromFile": "relative.env"}}, "absolute path"),
    ({"x": {"fromEnv": {"K": "V"}, "users": "alice"}}, "['x']['users']: must be a list"),
    ({"-x": {"fromEnv": {"K": "V"}}}, "secrets['-x']"),
    ({"x": "V"}, "must be a mapping"),
])
def test_a_bad_entry_is_a_startup_error_naming_it(config: dict, says: str) -> None:
    with pytest.raises(ValueError) as e:
        SecretRegistry(config)
    assert says in str(e.value)
    with pytest.raises(TraitError, match="c.NBValidation.secrets"):
        NBValidationSettings(secrets=config)


def test_the_trait_builds_the_registry() -> None:
    settings = NBValidationSettings(secrets={"w": {"fromEnv": {"K": "V"}, "groups": ["g"]}})
    settings.secret_registry().check("w", Caller("someone", frozenset({"g"})))


def test_a_project_settings_file_never_names_a_secret(tmp_path: Path) -> None:
    """A repository's settings file (nbvalidation.toml, [tool.nbvalidation]) would hand its own
    notebooks the secret of whoever validates it: refused, naming the key and its line; the lab's
    Options dialog (PUT project-settings) is refused the same way."""
    from jupyter_nbvalidation.service.errors import ApiError
    from jupyter_nbvalidation.service.project_settings import check_options
    from jupyter_nbvalidation.spec.project import SettingsError, load

    path = tmp_path / "nbvalidation.toml"
    path.write_text('timeout = "10m"\n\n[podConfig]\ncredentials = ["warehouse"]\n')
    with pytest.raises(SettingsError) as e:
        load(path)
    assert e.value.key == "podConfig.credentials" and e.value.line == 4 and "never by a file" in str(e.value)
    path.write_text('[[notebooks]]\nglob = "*.ipynb"\npodConfig = {credentials = ["warehouse"]}\n')
    with pytest.raises(SettingsError, match=r"notebooks\[0\]\.podConfig\.credentials"):
        load(path)
    with pytest.raises(ApiError) as api:
        check_options({"podConfig": {"credentials": ["warehouse"]}}, "nb.ipynb")
    assert api.value.status == 400 and api.value.field == "options.podConfig.credentials"
