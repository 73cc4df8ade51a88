"""The one masker of credentials (issue 23): one rule for URL user-info, one
free-text scrubber, and the paths text takes to a user (build logs, build
failure messages, events, error messages) going through them."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace

import pytest

import jupyter_nbvalidation.backends.build_failure as build_failure
import jupyter_nbvalidation.core.events as events
import jupyter_nbvalidation.environment.requirements as reqmod
from jupyter_nbvalidation.core.redaction import MASK, mask_urls, mask_values, scrub, userinfo


def test_the_mask_is_the_one_constant() -> None:
    assert MASK == "***" and reqmod.MASK is MASK


@pytest.mark.parametrize(("text", "shown"), [
    ("https://user:s3cret@host/simple", "https://user:***@host/simple"),
    ("https://TOKEN@host/simple", "https://***@host/simple"),
    ("https://:s3cret@host/x", "https://:***@host/x"),
    ("https://user:p@ss@host/x", "https://user:***@host/x"),  # the authority's last '@', as pip splits it
    ("https://user:@host/x", "https://user:@host/x"),  # nothing to hide
    ("https://host/x?mail=a@b", "https://host/x?mail=a@b"),  # an '@' after the authority is not user-info
    ("https://host/pkg@v1", "https://host/pkg@v1"),
    ("no url: user:pw@host", "no url: user:pw@host"),
    ("Failed to fetch `https://user:S3CRET@host/simple/x`: 401 from https://T0KEN@host/simple",
     "Failed to fetch `https://user:***@host/simple/x`: 401 from https://***@host/simple"),
    ('url="https://T0KEN@host/x" next="a@b"', 'url="https://***@host/x" next="a@b"'),
])
def test_the_url_rule(text: str, shown: str) -> None:
    assert mask_urls(text) == shown
    assert mask_urls(shown) == shown  # masked text masks to itself


@pytest.mark.parametrize("form", ["https://user:***@host/x", "https://***@host/x", "https://***:***@host/x"])
def test_masked_forms_stay_as_they_are(form: str) -> None:
    assert mask_urls(form) == form and scrub(form) == form


def test_userinfo_gives_the_build_form_and_the_display_form_by_the_same_split() -> None:
    info = userinfo("https://alice:pw@host/simple")
    assert info is not None and (info.user, info.colon, info.secret) == ("alice", True, "pw")
    assert info.with_secret("${NBV_SECRET_0}") == "https://alice:${NBV_SECRET_0}@host/simple"
    assert info.masked() == mask_urls("https://alice:pw@host/simple")
    token = userinfo("git+https://T0K@github.com/o/r@v1")
    assert token is not None and token.secret == "T0K" and token.masked() == "git+https://***@github.com/o/r@v1"
    assert userinfo("https://host/simple") is None and userinfo("see https://t@host") is None


@pytest.mark.parametrize("line", [
    "--index-url https://alice:S3CR3T@download.example/simple",
    "--extra-index-url https://TOKEN123@example.com/simple",
    "tool @ https://TOKEN123@example.com/tool-1.0-py3-none-any.whl",
    "pkg @ git+https://alice:S3CR3T@github.com/o/r@v1.0",
])
def test_the_display_lines_of_requirements_follow_the_rule(tmp_path, line: str) -> None:
    (tmp_path / "x.ipynb").write_text("{}")
    spec = {"notebook": {"path": "x.ipynb"}, "podConfig": {"buildConfig": {"requirements": [line]}}}
    r = reqmod.collect(spec, str(tmp_path), str(tmp_path / "x.ipynb"))
    assert r.display_lines == [mask_urls(line)]
    assert r.secrets and all(s not in r.display_lines[0] for s in r.secrets)


@pytest.mark.parametrize("url", [
    "https://{info}@host/simple",
    "https://{info}@host:8443/simple/",
    "https://{info}@host/a/b/c.whl#sha256=00ff",
    "https://{info}@host/simple?x=1&y=2",
    "https://{info}@[2001:db8::1]:8080/simple",
    "http://{info}@127.0.0.1/",
    "git+https://{info}@github.com/o/r@v1.0#egg=r",
    "git+ssh://{info}@github.com/o/r",
    "svn+https://{info}@host/repo",
])
@pytest.mark.parametrize("secret", ["S3cr3t-pw", "ghp_AbC123xyz", "p%40ss", "a:b", "p@ss", "~!$&'()*+,;="])
def test_every_url_shape_hides_the_secret_and_keeps_the_rest(url: str, secret: str) -> None:
    for info, shown in ((f"alice:{secret}", f"alice:{MASK}"), (secret, None)):
        text = url.format(info=info)
        if shown is None:  # a token alone: a colon in it makes its head the user name
            user, colon, _ = secret.partition(":")
            shown = f"{user}:{MASK}" if colon else MASK
        expected = url.format(info=shown)
        for framing in ("{}", "error: fetching {} failed", "`{}`", '"{}"', "({})", "{}\n"):
            assert mask_urls(framing.format(text)) == framing.format(expected), (framing, text)
            assert scrub(framing.format(text)) == framing.format(expected), (framing, text)
        if len(secret) > 4:
            assert secret.split(":")[-1] not in mask_urls(text)
        assert mask_urls(mask_urls(text)) == mask_urls(text)
        assert userinfo(text) is not None and userinfo(text).masked() == expected  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "shown"), [
    ("token=abc123 next", "token=*** next"),
    ("password: hunter2, rest", "password: ***, rest"),
    ("--PASSWD hunter2", "--PASSWD ***"),  # an option and its value
    ("PASSWD: hunter2", "PASSWD: ***"),
    # prose and version pins are not secrets: blanks alone separate a key from its value only
    # after an option's --, and '==' pins a version
    ("PASSWD hunter2", "PASSWD hunter2"),
    ("SyntaxError: unexpected token in line 3", "SyntaxError: unexpected token in line 3"),
    ("Collecting passwd==1.0", "Collecting passwd==1.0"),
    ("Authorization Basic dXNlcjpwdw==", "Authorization ***"),
    ("api_key=k1&x=1", "api_key=***&x=1"),
    ("api-key: k1", "api-key: ***"),
    ("https://host/simple?token=abc", "https://host/simple?token=***"),
    ("Authorization: Bearer eyJ.abc.def", "Authorization: ***"),
    ("authorization=Basic dXNlcjpwdw==", "authorization=***"),
    ("secret='x y'", "secret='*** y'"),
    ('{"token": "abc", "password":"p w"}', '{"token": "***", "password":"*** w"}'),
    ("https://x-access-token:ghs_123@github.com/o/r", "https://x-access-token:***@github.com/o/r"),
    ("token: https://T0K@host/x", "token: ***"),  # the whole value: no less safe
])
def test_key_value_secrets(text: str, shown: str) -> None:
    assert scrub(text) == shown
    assert scrub(shown) == shown


def test_given_secrets_longest_first_and_idempotent() -> None:
    text = "fetch abcdef then abc, and https://u:abcdef@h/ and https://TOK@h/"
    once = scrub(text, ["abc", "abcdef", ""])
    assert once == "fetch *** then ***, and https://u:***@h/ and https://***@h/"
    assert scrub(once, ["abc", "abcdef"]) == once
    assert mask_values("a*b", ["*"]) == "a*b"  # a value inside the mask is no secret: masking stays idempotent
    assert mask_values("x S3C y", ("S3C",)) == "x *** y"


def test_a_build_failure_message_masks_a_token_alone(tmp_path) -> None:
    """backends/build_failure.summary: the message of a failed local build step (and the
    Kubernetes Job builder's installer lines) masks a token-alone URL nobody gave as a secret."""
    log = ("$ uv pip install -r requirements.txt\n"
           "error: Failed to fetch: `https://ghp_T0KEN@host/simple/x/`\n"
           "  Caused by: HTTP status client error (401) for url (https://ghp_T0KEN@host/simple/x/)\n")
    message = build_failure.summary(log, "uv pip install", 2)
    assert "ghp_T0KEN" not in message and "https://***@host/simple/x/" in message
    assert "s3" not in build_failure.summary("$ x\nerror: https://alice:s3@h/ token=zz\n", "x", 1)
    assert "zz" not in build_failure.summary("$ x\nerror: https://alice:s3@h/ token=zz\n", "x", 1)


def test_a_build_log_line_is_scrubbed_on_its_way_to_the_log() -> None:
    """LocalBackend._run_step: what a build command prints goes through the scrubber before
    the log, the given secrets and a token-alone URL that was not given as one alike, also
    when the job gave no credentials (a URL of the server's own configuration may carry one)."""
    from jupyter_nbvalidation.backends.local.builds import BuildsRoom

    script = ("echo 'Looking in indexes: https://alice:GIVEN@host/simple'; "
              "echo 'fatal: could not read https://ghp_NOTGIVEN@github.com/o/r'; echo 'password=hunter2'")
    log = io.StringIO()
    step = SimpleNamespace(_niced=lambda argv: argv, niceness=0,
                           _wait_step=lambda build, proc: proc.wait())
    build = SimpleNamespace(proc=None, pid_file=None)
    for secrets in ({"NBV_SECRET_0": "GIVEN"}, None):
        log.seek(0)
        log.truncate()
        code = asyncio.run(BuildsRoom._run_step(step, build, ["sh", "-c", script], log,  # type: ignore[arg-type]
                                                        secrets))
        text = log.getvalue()
        assert code == 0 and "GIVEN" not in text and "NOTGIVEN" not in text and "hunter2" not in text, text
        assert "https://alice:***@host/simple" in text and "https://***@github.com/o/r" in text


def test_a_build_log_line_longer_than_the_limit_reaches_the_log_in_pieces(monkeypatch) -> None:
    """The filter never stops reading (the command would block on a full pipe): a line
    without an end goes to the log in pieces, the last piece at the command's end."""
    import jupyter_nbvalidation.backends.local.builds as builds

    monkeypatch.setattr(builds, "LOG_LINE_LIMIT", 1000)
    log = io.StringIO()
    step = SimpleNamespace(_niced=lambda argv: argv, _wait_step=lambda build, proc: proc.wait())
    script = "head -c 300000 /dev/zero | tr '\\0' x; echo; printf 'token=abc'"
    code = asyncio.run(builds.BuildsRoom._run_step(step, SimpleNamespace(), ["sh", "-c", script],  # type: ignore[arg-type]
                                                                log))
    text = log.getvalue()
    assert code == 0 and text.split("\n", 1)[1].count("x") == 300000 and text.endswith("\ntoken=***"), text[-40:]


def test_event_notes_use_the_same_rule() -> None:
    """An event's note goes through redaction.scrub: a URL shows its user name (``***:***@``
    before), a token alone is masked (kept before)."""
    job = {"apiVersion": "nbvalidation.dev/v1", "kind": "NotebookValidationJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}}
    note = events.make_event(job, reason="BuildFailed",  # type: ignore[arg-type]
                             note="pull from https://alice:pw@registry/x and https://T0K@host/y, token=abc")["note"]
    assert note == "pull from https://alice:***@registry/x and https://***@host/y, token=***"


def test_kubernetes_builders_and_client_import_the_masker_from_redaction() -> None:
    from pathlib import Path

    from import_graph import read_imports

    root = Path(reqmod.__file__).parents[1]
    for rel in ("backends/kubernetes/client.py", "backends/kubernetes/builders/job.py",
                "backends/kubernetes/builders/tekton.py", "backends/kubernetes/builders/openshift.py",
                "engine/phases.py", "engine/retries.py", "engine/runs.py", "engine/transitions.py"):
        sources = {r.source for r in read_imports(root / rel, root.parent)
                   if r.source is not None and r.name.rpartition(".")[2] == "scrub"}
        assert sources == {"jupyter_nbvalidation.core.redaction"}, (rel, sources)


@pytest.mark.parametrize("lines", [10, 5000])  # a short log is masked in place, a long one (> 64 KiB) off the loop
def test_the_service_serves_a_build_log_masked_line_by_line(lines: int) -> None:
    from jupyter_nbvalidation.service.jobs import JobService

    log = "".join(f"step {i}: pip install --index-url https://alice:pw{i}@host/simple pkg\n" for i in range(lines))
    job = {"metadata": {"name": "j"}, "spec": {"notebook": {"path": "n.ipynb"}}, "status": {"phase": "Succeeded"}}

    async def get(name: str) -> dict:
        return job

    async def build_log(j: dict) -> str:
        return log

    service = SimpleNamespace(get=get, backend=SimpleNamespace(build_log=build_log))
    chunk = asyncio.run(JobService.build_log(service, "j", 0))  # type: ignore[arg-type]
    text = chunk.data.decode()
    assert chunk.complete and chunk.next_offset == len(chunk.data)
    assert "pw" not in text and text.count("https://alice:***@host/simple") == lines, text[:200]
    assert (len(log) > 65536) == (lines == 5000)
