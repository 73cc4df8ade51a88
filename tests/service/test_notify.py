"""Red without being asked (issue 45, docs/watching.md "When it turns red"): a schedule's series
(jobs labelled nbvalidation.dev/schedule) that changes colour tells its owner by itself. Real
parts: kernels and SQLite on the local backend, a git repository pushed to in the test, and a
webhook receiver (a threaded HTTP server on 127.0.0.1) that records what it is sent."""

from __future__ import annotations

import json
import socket
import time

import pytest
from git_support import Repo
from helpers import make_wheel, wait_async, write_notebook
from webhook_receiver import Receiver, verified

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.notify import NOTIFICATION_ANNOTATION, decide
from jupyter_nbvalidation.service.webhook import Webhook, parse_webhooks
from jupyter_nbvalidation.store.base import SCHEDULE_LABEL

NO_BUILD = {"buildConfig": {"enabled": False}}
KEY = "the-literal-hmac-key"


def _use(local, *hooks: Webhook, max_steps: int = 6) -> None:
    n = local.service.notifier
    n.webhooks, n.max_steps, n.backoff, n.timeout = list(hooks), max_steps, 0.05, 5.0


async def _scheduled(local, spec: dict, schedule: str = "nightly", timeout: float = 300) -> dict:
    job = await local.service.submit(spec, labels={SCHEDULE_LABEL: schedule})
    done = await local.engine.wait_for_terminal(job["metadata"]["name"], timeout)
    await local.engine.recorder.flush()
    await local.service.notifier.idle()
    return done


def _git_spec(url: str, ref: str = "main") -> dict:
    return {"notebook": {"git": {"url": url, "ref": ref}, "path": "nbs/check.ipynb"}, "podConfig": NO_BUILD}


def test_the_decision_follows_the_series_colour():
    green = {"status": {"phase": "Succeeded"}}
    red = {"status": {"phase": "Failed", "reason": "ValidationFailed"}}
    infra = {"status": {"phase": "Failed", "reason": "InfrastructureFailed"}}
    cancelled = {"status": {"phase": "Failed", "reason": "Cancelled"}}
    assert decide(red, [green]) == "turned-red"
    assert decide(red, [cancelled, infra, green]) == "turned-red"  # no verdict in between
    assert decide(red, [red, green]) is None  # stays red: told once
    assert decide(red, []) is None  # nothing was green
    assert decide(green, [infra, red]) == "back-to-green"
    assert decide(green, [green]) is None
    assert decide(infra, [green]) == "infrastructure-failed"
    assert decide(infra, [infra, green]) is None
    assert decide(cancelled, [green]) is None


def test_webhooks_config_is_checked_naming_the_field():
    assert parse_webhooks(["http://h/x", {"url": "https://h/y", "secret": "k"}])[1].secret == "k"
    for bad, field in (([{"url": "ftp://h"}], "webhooks[0].url"), ([{"url": "http://h", "token": "x"}],
                       "webhooks[0].token"), ([{"url": "http://h", "secret": "a", "key": "b"}], "webhooks[0].key")):
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
            parse_webhooks(bad)


@pytest.mark.asyncio
async def test_a_push_that_breaks_a_cell_names_the_commit_once(local, receiver, tmp_path):
    """Commit A green; commit B breaks a cell: turned-red naming B (not the environment), signed;
    red again: nothing; a ref that cannot be fetched: infrastructure-failed; fixed by C:
    back-to-green; broken again by D: turned-red again, naming D."""
    _use(local, Webhook(receiver.url, key=KEY))
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    repo.commit("A: the first notebook")
    assert (await _scheduled(local, _git_spec(repo.url)))["status"]["phase"] == Phase.SUCCEEDED
    assert receiver.got == []  # green after nothing: no news

    repo.notebook("nbs/check.ipynb", ["x = 2", "assert x == 1, 'x moved'"])
    b = repo.commit("B: x is two now")
    red = await _scheduled(local, _git_spec(repo.url))
    assert red["status"]["phase"] == Phase.FAILED and red["status"]["source"]["commit"] == b
    assert len(receiver.got) == 1
    payload, headers = receiver.got[0]
    assert verified(receiver.raw, headers, KEY) and headers["x-nbvalidation-delivery"]
    assert payload["event"] == "turned-red" and payload["schedule"] == "nightly"
    assert payload["job"]["name"] == red["metadata"]["name"] and payload["job"]["source"]["commit"] == b
    assert payload["culprit"]["kind"] == "commit" and payload["culprit"]["commit"] == b, payload["culprit"]
    message = payload["culprit"]["message"]
    assert message == f"the commit {b[:12]} 'B: x is two now' (the environment did not change)", message
    assert payload["culprit"]["commits"] == [{"sha": b, "subject": "B: x is two now", "files": ["nbs/check.ipynb"]}]
    assert payload["changes"]["since"]["name"] and payload["changes"]["cells"]["edited"] == [1]

    from jupyter_nbvalidation.cli.render import culprit_block  # describe's lines

    shown = culprit_block(await local.store.get(red["metadata"]["name"]), None)
    assert shown == f"\nNotification: turned-red (schedule nightly, sent)\nThe cause (commit): {message}", shown

    again = await _scheduled(local, _git_spec(repo.url))
    assert again["status"]["phase"] == Phase.FAILED and len(receiver.got) == 1  # still red: told once

    infra = await _scheduled(local, _git_spec(repo.url, "no-such-branch"), timeout=60)
    assert infra["status"]["reason"] == "InfrastructureFailed"
    assert [p["event"] for p, _ in receiver.got] == ["turned-red", "infrastructure-failed"]
    assert receiver.got[1][0]["culprit"] is None and receiver.got[1][0]["changes"] is None  # no search

    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    repo.commit("C: back to one")
    assert (await _scheduled(local, _git_spec(repo.url)))["status"]["phase"] == Phase.SUCCEEDED
    repo.notebook("nbs/check.ipynb", ["x = 3", "assert x == 1, 'x moved'"])
    d = repo.commit("D: three")
    assert (await _scheduled(local, _git_spec(repo.url)))["status"]["phase"] == Phase.FAILED
    assert [p["event"] for p, _ in receiver.got] == ["turned-red", "infrastructure-failed", "back-to-green",
                                                      "turned-red"]
    assert receiver.got[3][0]["culprit"]["commit"] == d

    # kept on the job: looked at again (a restart, another engine), nothing is sent twice
    assert await local.service.notifier.handle(red["metadata"]["name"]) is None
    assert len(receiver.got) == 4
    listed = (await local.service.notifications())["items"]
    assert [i["event"] for i in listed][:1] == ["turned-red"] and len(listed) == 4
    assert all(i["state"] == "sent" and i["seen"] is None for i in listed)


@pytest.mark.asyncio
async def test_a_receiver_that_fails_twice_gets_the_third_try_and_one_down_is_recorded(local, notebook):
    """500, 500, 200: delivered on the 3rd attempt; a closed port: undelivered after its
    attempts, in seconds; the job's verdict is its own; the lab's list shows it, seen once marked."""
    flaky = Receiver([500, 500])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/hook"  # nothing listens once closed
    try:
        _use(local, Webhook(flaky.url, key=KEY), Webhook(down))
        local.service.notifier.attempts = 4
        nb = notebook("nb.ipynb", ["x = 1", "assert x == 1"])
        spec = {"notebook": {"path": nb}, "podConfig": NO_BUILD}
        assert (await _scheduled(local, spec))["status"]["phase"] == Phase.SUCCEEDED
        write_notebook(local.root / nb, ["x = 2", "assert x == 1"])
        t0 = time.monotonic()
        red = await _scheduled(local, spec)
        took = time.monotonic() - t0
        assert red["status"]["phase"] == Phase.FAILED and red["status"]["reason"] == "ValidationFailed"
        assert flaky.tries == 3 and len(flaky.got) == 1 and flaky.got[0][0]["event"] == "turned-red"
        assert flaky.got[0][0]["culprit"]["kind"] == "unknown"  # no commit, same environment: the cells changed
        assert took < 60, took
        name = red["metadata"]["name"]
        record = json.loads((await local.store.get(name))["metadata"]["annotations"][NOTIFICATION_ANNOTATION])
        assert record["state"] == "undelivered"
        by_url = {d["url"]: d for d in record["deliveries"]}
        assert by_url[flaky.url]["delivered"] and by_url[flaky.url]["attempts"] == 3
        assert not by_url[down]["delivered"] and by_url[down]["attempts"] == 4 and by_url[down]["error"]
        listed = (await local.service.notifications())
        assert listed["unseen"] == 1 and listed["items"][0]["id"] == name
        seen = await local.service.notification_seen(name)
        assert seen["seen"] and (await local.service.notifications())["unseen"] == 0
        with pytest.raises(ApiError) as e:
            await local.service.notification_seen("no-such-job")
        assert e.value.status == 404
    finally:
        flaky.close()


@pytest.mark.asyncio
async def test_a_secret_of_the_notebook_and_the_hooks_key_are_in_no_payload(local, notebook, receiver,
                                                                            monkeypatch):
    value, hook_key = "s3cr3t-Warehouse-Pa55", "hook-key-from-a-secret-9f2"
    monkeypatch.setenv("NBV_TEST_NOTIFY_PASSWORD", value)
    monkeypatch.setenv("NBV_TEST_NOTIFY_HOOK", hook_key)
    local.backend.secrets = SecretRegistry({"warehouse": {"fromEnv": {"DB_PASSWORD": "NBV_TEST_NOTIFY_PASSWORD"}},
                                            "hook": {"fromEnv": {"HMAC": "NBV_TEST_NOTIFY_HOOK"}}})
    _use(local, Webhook(receiver.url, secret="hook"))
    nb = notebook("nb.ipynb", ["import os\npw = os.environ['DB_PASSWORD']\nprint(pw)", "assert True"])
    spec = {"notebook": {"path": nb}, "podConfig": {**NO_BUILD, "credentials": ["warehouse"]}}
    assert (await _scheduled(local, spec))["status"]["phase"] == Phase.SUCCEEDED
    write_notebook(local.root / nb, ["import os\npw = os.environ['DB_PASSWORD']\nprint(pw)",
                                     "raise ValueError('the password is ' + pw + ' and ' + pw[::-1])"])
    red = await _scheduled(local, spec)
    assert red["status"]["phase"] == Phase.FAILED
    assert len(receiver.got) == 1 and verified(receiver.raw, receiver.got[0][1], hook_key)
    stored = json.dumps(await local.store.get(red["metadata"]["name"]))
    listed = json.dumps(await local.service.notifications())
    for text in (receiver.raw.decode(), json.dumps(receiver.got[0][1]), stored, listed):
        assert value not in text and hook_key not in text


@pytest.mark.asyncio
async def test_environment_drift_names_the_package(local, receiver):
    """No commit, no cell changed: a local wheel moved to 2.0 (beside a harmless one); the search
    runs by itself, bounded, and the culprit is the package."""
    _use(local, Webhook(receiver.url, key=KEY), max_steps=6)
    proj = local.root / "proj"
    (proj / "wheels").mkdir(parents=True)
    for name in ("nbvnotifya", "nbvnotifyb"):
        (proj / "wheels" / f"{name}-1.0-py3-none-any.whl").write_bytes(make_wheel(name, "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvnotifya\nnbvnotifyb\n")
    write_notebook(proj / "nb.ipynb", ["import nbvnotifya, nbvnotifyb", "assert nbvnotifya.VALUE == 1"])
    spec = {"notebook": {"path": "proj/nb.ipynb"}}
    assert (await _scheduled(local, spec, timeout=600))["status"]["phase"] == Phase.SUCCEEDED
    for name in ("nbvnotifya", "nbvnotifyb"):
        (proj / "wheels" / f"{name}-2.0-py3-none-any.whl").write_bytes(make_wheel(name, "2.0", "VALUE = 2\n"))
    red = await _scheduled(local, spec, timeout=600)
    assert red["status"]["phase"] == Phase.FAILED
    await wait_async(lambda: receiver.got, 600, "the notification after the search")
    payload = receiver.got[0][0]
    assert payload["event"] == "turned-red" and payload["culprit"]["kind"] == "packages", payload["culprit"]
    assert payload["culprit"]["packages"] == [{"name": "nbvnotifya", "from": "1.0", "to": "2.0"}]
    assert payload["culprit"]["search"]["validations"] <= 6
    assert payload["changes"]["packages"]["changedAny"]


@pytest.mark.asyncio
async def test_a_push_that_also_moves_a_package_blames_the_commit(local, receiver, tmp_path):
    """Commit B breaks a cell and brings a new version of a package (both changed): the search's
    first step (commit B with the last success's pins) is still red, so the cause is the
    commit, not the environment."""
    _use(local, Webhook(receiver.url, key=KEY), max_steps=4)
    repo = Repo(tmp_path / "git")
    (repo.work / "nbs" / "wheels").mkdir(parents=True)
    (repo.work / "nbs" / "wheels" / "nbvnotifyc-1.0-py3-none-any.whl").write_bytes(
        make_wheel("nbvnotifyc", "1.0", "VALUE = 1\n"))
    repo.write("nbs/requirements.txt", "--find-links ./wheels\nnbvnotifyc\n")
    repo.notebook("nbs/check.ipynb", ["import nbvnotifyc\nx = 1", "assert x == 1, 'x moved'"])
    repo.commit("A")
    spec = {"notebook": {"git": {"url": repo.url, "ref": "main"}, "path": "nbs/check.ipynb"}}
    first = await _scheduled(local, spec, timeout=600)
    assert first["status"]["phase"] == Phase.SUCCEEDED, first["status"].get("message")
    (repo.work / "nbs" / "wheels" / "nbvnotifyc-2.0-py3-none-any.whl").write_bytes(
        make_wheel("nbvnotifyc", "2.0", "VALUE = 2\n"))
    repo.notebook("nbs/check.ipynb", ["import nbvnotifyc\nx = 2", "assert x == 1, 'x moved'"])
    b = repo.commit("B: x is two, and nbvnotifyc 2.0")
    red = await _scheduled(local, spec, timeout=600)
    assert red["status"]["phase"] == Phase.FAILED
    assert len(receiver.got) == 1, receiver.got
    payload = receiver.got[0][0]
    assert payload["changes"]["packages"]["upgraded"] == [{"name": "nbvnotifyc", "from": "1.0", "to": "2.0"}]
    culprit = payload["culprit"]
    assert culprit["kind"] == "commit" and culprit["commit"] == b, culprit
    assert "last success's environment too" in culprit["message"]
    steps = (await local.service.bisect_status(red["metadata"]["name"]))["steps"]
    assert len(steps) == 1 and steps[0]["outcome"] == "fail"  # one validation decided it


def test_describe_and_the_reports_name_the_commit(tmp_path):
    """`run --git` green at A, red at B (only the commit moved): the JUnit property
    nbvalidation.culprit, the HTML report and `describe` name commit B and its subject."""
    import xml.etree.ElementTree as ET

    from helpers import cli

    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    repo.commit("A")
    local = ("--local", "--data-dir", str(tmp_path / "data"))
    git = ("--git", repo.url, "--ref", "main", "--no-build", "nbs/check.ipynb")
    green = cli("run", *local, *git, cwd=tmp_path, no_servers=True)
    assert green.returncode == 0, green.stdout + green.stderr
    repo.notebook("nbs/check.ipynb", ["x = 2", "assert x == 1, 'x moved'"])
    b = repo.commit("B: x is two now")
    red = cli("run", *local, *git, "--junitxml", str(tmp_path / "r.xml"), "--html", str(tmp_path / "r.html"),
              cwd=tmp_path, no_servers=True)
    assert red.returncode == 1, red.stdout + red.stderr
    expected = f"the cause (commit): the commit {b[:12]} 'B: x is two now' (the environment did not change)"
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "r.xml").iter("property")}
    assert props.get("nbvalidation.culprit") == expected, props
    assert "the commit " + b[:12] in (tmp_path / "r.html").read_text()
    out = next(ET.parse(tmp_path / "r.xml").iter("system-out")).text or ""
    name = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("job: "))
    described = cli("describe", *local, name, cwd=tmp_path, no_servers=True)
    assert described.returncode == 0 and "The cause (commit): the commit " + b[:12] in described.stdout, \
        described.stdout + described.stderr


def test_a_probe_of_a_git_job_validates_its_commit_and_payloads_are_masked():
    from jupyter_nbvalidation.service.notify import masked
    from jupyter_nbvalidation.why_red.bisect import _probe_spec

    failing = {"spec": {"notebook": {"git": {"url": "file:///r.git", "ref": "main"}, "path": "nb.ipynb"}},
               "status": {"source": {"url": "file:///r.git", "ref": "main", "commit": "c" * 40}}}
    spec = _probe_spec(failing, ["a==1"])
    assert spec["notebook"]["git"]["ref"] == "c" * 40  # not where main is by the time the step runs
    assert failing["spec"]["notebook"]["git"]["ref"] == "main"
    doc = {"m": "password=hunter2 and s3cr3t-value", "l": ["x s3cr3t-value", 3, None], "u": "https://u:p@h/x"}
    assert masked(doc, ["s3cr3t-value"]) == {"m": "password=*** and ***", "l": ["x ***", 3, None],
                                            "u": "https://u:***@h/x"}


@pytest.fixture
def jp_server_config(tmp_path, receiver):
    """The server's own config: a webhook with a literal key and the traits the notifier takes."""
    return {"ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
            "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
            "NBValidation": {"webhooks": [{"url": receiver.url, "key": KEY}], "webhook_backoff": 0.05,
                             "auto_bisect_max_steps": 0, "public_url": "https://lab.example.org/user/me/"}}


async def test_the_server_notifies_and_the_lab_lists_and_marks_over_rest(jp_fetch, jp_root_dir, jp_serverapp,
                                                                         receiver):
    from helpers import rest_call as call
    from tornado.httpclient import HTTPClientError

    service = jp_serverapp.web_app.settings["nbvalidation_service"]
    write_notebook(jp_root_dir / "nb.ipynb", ["x = 1", "assert x == 1"])
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": NO_BUILD}

    async def scheduled() -> dict:
        job = await service.submit(spec, labels={SCHEDULE_LABEL: "hourly"})
        done = await service.wait_for_terminal(job["metadata"]["name"], 240)
        await service.engine.recorder.flush()
        await service.notifier.idle()
        return done

    assert (await scheduled())["status"]["phase"] == Phase.SUCCEEDED
    assert (await call(jp_fetch, "notifications")) == {"kind": "NotificationList", "items": [], "unseen": 0}
    write_notebook(jp_root_dir / "nb.ipynb", ["x = 2", "assert x == 1"])
    red = await scheduled()
    name = red["metadata"]["name"]
    assert len(receiver.got) == 1 and verified(receiver.raw, receiver.got[0][1], KEY)
    payload = receiver.got[0][0]
    assert payload["url"] == f"https://lab.example.org/user/me/nbvalidation/api/v1/jobs/{name}"
    assert payload["culprit"]["kind"] == "unknown" and payload["schedule"] == "hourly"
    listed = await call(jp_fetch, "notifications")
    assert listed["unseen"] == 1 and [i["id"] for i in listed["items"]] == [name]
    item = listed["items"][0]
    assert item["event"] == "turned-red" and item["state"] == "sent" and item["seen"] is None
    assert item["deliveries"][0]["delivered"] and item["deliveries"][0]["attempts"] == 1
    seen = await call(jp_fetch, "notifications", name, "seen", method="POST", body={})
    assert seen["seen"] and (await call(jp_fetch, "notifications"))["unseen"] == 0
    for other in ("no-such-job", "nb-0000"):
        with pytest.raises(HTTPClientError) as e:
            await call(jp_fetch, "notifications", other, "seen", method="POST", body={})
        assert e.value.code == 404


class SmtpReceiver:
    """A few lines of SMTP on loopback (asyncio): takes every message, records its DATA."""

    def __init__(self):
        self.messages: list[str] = []
        self.server = None

    async def start(self) -> int:
        async def session(reader, writer):
            writer.write(b"220 test ready\r\n")
            while line := await reader.readline():
                verb = line[:4].upper()
                if verb == b"DATA":
                    writer.write(b"354 go on\r\n")
                    lines = []
                    while (got := await reader.readline()) not in (b".\r\n", b""):
                        lines.append(got.decode())
                    self.messages.append("".join(lines))
                    writer.write(b"250 taken\r\n")
                elif verb == b"QUIT":
                    writer.write(b"221 bye\r\n")
                    break
                else:  # EHLO, HELO, MAIL, RCPT, RSET, NOOP
                    writer.write(b"250 ok\r\n")
                await writer.drain()
            await writer.drain()
            writer.close()

        import asyncio

        self.server = await asyncio.start_server(session, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]


@pytest.mark.asyncio
async def test_a_red_is_also_emailed(local, notebook):
    from jupyter_nbvalidation.service.smtp_mail import Mail

    smtp = SmtpReceiver()
    port = await smtp.start()
    try:
        _use(local)
        local.service.notifier.mail = Mail("127.0.0.1", port, "nbv@example.invalid", ("owner@example.invalid",))
        nb = notebook("nb.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
        spec = {"notebook": {"path": nb}, "podConfig": NO_BUILD}
        assert (await _scheduled(local, spec, schedule="weekly"))["status"]["phase"] == Phase.SUCCEEDED
        assert smtp.messages == []
        write_notebook(local.root / nb, ["x = 2", "assert x == 1, 'x moved'"])
        red = await _scheduled(local, spec, schedule="weekly")
        assert len(smtp.messages) == 1, smtp.messages
        text = smtp.messages[0]
        assert "Subject: [nbvalidation] nb.ipynb (schedule weekly) turned red" in text
        assert "To: owner@example.invalid" in text and f"job: {red['metadata']['name']}" in text
        assert "the cause (unknown)" in text and "since the last success: cells edited 1" in text
        record = json.loads((await local.store.get(red["metadata"]["name"]))["metadata"]["annotations"][
            NOTIFICATION_ANNOTATION])
        assert record["deliveries"] == [{"url": f"smtp://127.0.0.1:{port}", "delivered": True, "attempts": 1}]
    finally:
        smtp.server.close()


@pytest.mark.asyncio
async def test_what_a_stopped_server_left_undecided_is_sent_once_by_the_next(local, notebook, receiver):
    """The server stopped before it decided (no record), or while it was deciding (nothing sent
    yet): the next leader sends each once; one left being sent is not sent again."""
    _use(local, Webhook(receiver.url, key=KEY))
    notifier = local.service.notifier
    reds = {}
    for schedule in ("left-undecided", "left-deciding", "left-sending"):
        nb = notebook(f"{schedule}.ipynb", ["x = 1", "assert x == 1"])
        spec = {"notebook": {"path": nb}, "podConfig": NO_BUILD}
        assert (await _scheduled(local, spec, schedule=schedule))["status"]["phase"] == Phase.SUCCEEDED
        write_notebook(local.root / nb, ["x = 2", "assert x == 1"])
        local.engine.recorder.listeners.remove(notifier.on_event)  # the server stops before it decides
        try:
            reds[schedule] = (await _scheduled(local, spec, schedule=schedule))["metadata"]["name"]
        finally:
            local.engine.recorder.listeners.append(notifier.on_event)
    await local.store.set_annotation(reds["left-deciding"], NOTIFICATION_ANNOTATION,
                                     json.dumps({"event": "turned-red", "state": "deciding"}))
    await local.store.set_annotation(reds["left-sending"], NOTIFICATION_ANNOTATION,
                                     json.dumps({"event": "turned-red", "state": "sending"}))
    assert receiver.got == []
    assert await notifier.resume() == 2
    assert sorted(p["job"]["name"] for p, _ in receiver.got) == sorted([reds["left-undecided"], reds["left-deciding"]])
    assert await notifier.resume() == 0 and len(receiver.got) == 2
