"""Issue 44: the queue is served round-robin by owner (engine/admission.py fair_order), so one
user's big run never holds another's single click behind all of it."""

from __future__ import annotations

from jupyter_nbvalidation.engine.admission import fair_order


def job(name: str, t: int, owner: str | None) -> dict:
    labels = {"nbvalidation.dev/owner": owner} if owner else {}
    return {"metadata": {"name": name, "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z", "labels": labels}}


def names(jobs: list[dict]) -> list[str]:
    return [j["metadata"]["name"] for j in jobs]


def test_a_single_click_goes_next_after_a_big_runs_first_job_not_after_all_of_it():
    alice = [job(f"a{i:02d}", i, "alice") for i in range(20)]
    bob = job("b", 30, "bob")  # submitted after all of alice's
    order = names(fair_order([*alice, bob], holding=[]))
    assert order[:3] == ["a00", "b", "a01"]
    assert order[3:] == [f"a{i:02d}" for i in range(2, 20)]  # alice's own in submit order


def test_the_slots_an_owner_holds_count_so_a_user_running_two_waits_behind_one_running_none():
    holding = [job("a-run1", 0, "alice"), job("a-run2", 1, "alice")]
    waiting = [job("a3", 2, "alice"), job("b1", 3, "bob"), job("c1", 4, "carol"), job("b2", 5, "bob")]
    assert names(fair_order(waiting, holding)) == ["b1", "c1", "b2", "a3"]


def test_jobs_without_an_owner_keep_submit_order():
    waiting = [job(n, t, None) for n, t in (("z", 3), ("x", 1), ("y", 2))]
    assert names(fair_order(waiting, holding=[job("r", 0, None)])) == ["x", "y", "z"]
