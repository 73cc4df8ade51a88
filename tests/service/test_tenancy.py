"""Issue 44: a user's view of the service (service/tenancy.py, JobService.as_user) on the real
local service (SQLite store, local backend), its engine not started so that the jobs stay
waiting: ownership (another user's job is a 404, a list holds one's own), the quotas' 429 with
its numbers, and the admin's view."""

from __future__ import annotations

import asyncio

import pytest
from helpers import write_notebook

from jupyter_nbvalidation.composition import local_service
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.tenancy import Quotas, owner_label

SPEC = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}}


@pytest.fixture
def service(tmp_path):
    write_notebook(tmp_path / "root" / "nb.ipynb", ["print(1)"])
    svc = local_service(str(tmp_path / "root"), str(tmp_path / "data"))
    return svc


async def test_each_user_sees_and_touches_only_their_own_jobs_and_an_admin_all(service):
    await service.open()
    try:
        alice, bob, admin = service.as_user("alice"), service.as_user("bob"), service.as_user("root", admin=True)
        job = await alice.submit(dict(SPEC))
        name = job["metadata"]["name"]
        assert job["metadata"]["labels"] == {"nbvalidation.dev/owner": "alice"}
        assert (await alice.get(name))["metadata"]["name"] == name
        for call in (bob.get(name), bob.events(name), bob.timeline(name), bob.cancel(name), bob.delete(name),
                     bob.bisect_status(name), bob.executed_notebook(name), bob.lock(name)):
            with pytest.raises(ApiError) as e:
                await call
            assert e.value.status == 404 and name in e.value.message
        assert [j["metadata"]["name"] for j in (await alice.list_jobs(None, 50, None))["items"]] == [name]
        assert (await bob.list_jobs(None, 50, None))["items"] == []
        assert [j["metadata"]["name"] for j in (await admin.list_jobs(None, 50, None))["items"]] == [name]
        assert (await admin.get(name))["metadata"]["name"] == name
        # the service itself (a single user's server) is unscoped, as before
        assert (await service.get(name))["metadata"]["name"] == name
    finally:
        await service.close()


async def test_past_a_quota_a_submit_is_429_with_retry_after_and_the_numbers_and_creates_nothing(service):
    await service.open()
    try:
        service.quotas = Quotas(max_active=3, max_queued=2, retry_after=9)
        alice, bob = service.as_user("alice"), service.as_user("bob")
        for _ in range(2):
            await alice.submit(dict(SPEC))
        with pytest.raises(ApiError) as e:
            await alice.submit(dict(SPEC))
        assert e.value.status == 429 and e.value.retry_after == 9
        assert e.value.details == {"user": "alice", "active": 2, "queued": 2, "maxActivePerUser": 3,
                                   "maxQueuedPerUser": 2}
        assert "max_queued_per_user" in e.value.message
        assert len((await alice.list_jobs(None, 50, None))["items"]) == 2  # nothing created
        await bob.submit(dict(SPEC))  # bob is not held by alice's quota
        service.quotas = Quotas(max_active=2, max_queued=None, retry_after=9)
        alice = service.as_user("alice")  # a view takes the quotas as they are when it is made
        with pytest.raises(ApiError) as e:
            await alice.submit(dict(SPEC))
        assert e.value.status == 429 and "max_active_per_user" in e.value.message
        # submits at once cannot both pass the last free place
        service.quotas = Quotas(max_active=4, max_queued=None)
        alice = service.as_user("alice")
        results = await asyncio.gather(*(alice.submit(dict(SPEC)) for _ in range(4)), return_exceptions=True)
        assert sum(isinstance(r, ApiError) and r.status == 429 for r in results) == 2, results
    finally:
        await service.close()


def test_an_owner_label_is_the_name_or_an_escape_that_no_two_users_share():
    assert owner_label("alice") == "alice"
    a, b = owner_label("a@b.org"), owner_label("a_b.org")
    assert a != b and a.startswith("a_b.org-") and len(a) <= 63
    assert owner_label("x" * 100) != owner_label("x" * 99) and len(owner_label("x" * 100)) <= 63
