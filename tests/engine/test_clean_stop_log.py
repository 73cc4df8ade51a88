"""A clean stop of the only server hands the lead back: its log never says "lost leadership;
another server reconciles now" (issue 42), which stays for a lead another server took.
A real local backend (SQLite store and its lease), a real engine."""

from __future__ import annotations

import logging

from conftest import make_local
from helpers import wait_async


async def test_a_clean_stop_does_not_log_lost_leadership(tmp_path, caplog):
    env = make_local(tmp_path)
    caplog.set_level(logging.INFO, logger="nbvalidation.test")
    await env.engine.start()

    async def leading() -> bool:
        return env.engine.leading.is_set()

    await wait_async(leading, 30, "the engine to take the lead")
    await env.engine.stop()  # the server's clean shutdown (app.py stops the service, then the engine)
    said = [r.getMessage() for r in caplog.records if r.name == "nbvalidation.test"]
    assert "nbvalidation: this server reconciles jobs" in said, said
    assert not any("lost leadership" in m for m in said), said
    assert "nbvalidation: handed the lead back" in said, said


async def test_a_lead_taken_away_still_says_so(tmp_path, caplog):
    env = make_local(tmp_path)
    caplog.set_level(logging.INFO, logger="nbvalidation.test")
    await env.engine.start()

    async def leading() -> bool:
        return env.engine.leading.is_set()

    await wait_async(leading, 30, "the engine to take the lead")
    env.engine.lost_leadership()  # what the lease's renewal says when another server holds it now
    said = [r.getMessage() for r in caplog.records if r.name == "nbvalidation.test"]
    assert "nbvalidation: lost leadership; another server reconciles now" in said, said
    await env.engine.stop()
