"""The schedules' cron expressions (core/cron.py): CronJob's five fields in UTC, its macros,
the next tick, the one catch-up tick after downtime, and a refusal naming the field."""

from __future__ import annotations

import datetime as dt

import pytest

from jupyter_nbvalidation.core import cron

UTC = dt.timezone.utc
AT = dt.datetime(2026, 12, 7, 17, 13, 22, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(("expr", "first", "second"), [
    ("*/5 * * * *", "2026-12-07 17:15", "2026-12-07 17:20"),
    ("@hourly", "2026-12-07 18:00", "2026-12-07 19:00"),
    ("@daily", "2026-12-08 00:00", "2026-12-09 00:00"),
    ("@weekly", "2026-12-13 00:00", "2026-12-20 00:00"),
    ("0 9 * * mon-fri", "2026-12-08 09:00", "2026-12-09 09:00"),
    ("0 9 * * 5-7", "2026-12-11 09:00", "2026-12-12 09:00"),  # 7 is Sunday, as 0
    ("30 2 29 feb *", "2028-02-29 02:30", "2032-02-29 02:30"),
    ("0 0 13 * fri", "2026-12-11 00:00", "2026-12-13 00:00"),  # both day fields: either matches
    ("15,45 8-10/2 * 12 *", "2026-12-08 08:15", "2026-12-08 08:45"),
])
def test_next_ticks(expr, first, second):
    c = cron.parse(expr)
    one = c.next_after(AT)
    assert one.strftime("%Y-%m-%d %H:%M") == first
    assert c.next_after(one).strftime("%Y-%m-%d %H:%M") == second


def test_one_catch_up_tick_for_many_missed():
    c = cron.parse("*/5 * * * *")
    later = AT + dt.timedelta(minutes=31)
    assert c.latest_until(AT, later) == dt.datetime(2026, 12, 7, 17, 40, tzinfo=UTC)
    assert c.latest_until(AT, AT + dt.timedelta(minutes=1)) is None


def test_a_seconds_field_only_when_asked():
    with pytest.raises(cron.CronError, match="6 fields"):
        cron.parse("*/2 * * * * *")
    c = cron.parse("*/2 * * * * *", seconds=True)
    assert c.next_after(AT) == AT.replace(second=24)


@pytest.mark.parametrize(("expr", "says"), [
    ("", "empty"), ("* * *", "3 fields"), ("61 * * * *", "minute: 61 is outside 0-59"),
    ("* 24 * * *", "hour: 24"), ("* * 0 * *", "day of month: 0"), ("* * * 13 *", "month: 13"),
    ("* * * * 8", "day of week: 8"), ("a * * * *", "minute: 'a' is not a number"),
    ("5-1 * * * *", "runs backwards"), ("*/0 * * * *", "step"), ("@often", "unknown macro"),
    ("0 0 31 2 *", "names no time"), ("1,,2 * * * *", "empty item"),
])
def test_bad_expressions_say_which_field_and_why(expr, says):
    with pytest.raises(cron.CronError, match=says.replace("*", r"\*")):
        cron.parse(expr).next_after(AT)


@pytest.mark.parametrize("expr", ["*/5 * * * *", "@hourly", "@daily", "0 9 * * mon-fri", "30 2 29 feb *",
                                  "0 0 13 * fri", "15,45 8-10/2 * 12 *"])
def test_the_catch_up_tick_is_the_last_of_the_ticks_walked_one_by_one(expr):
    c = cron.parse(expr)
    for hours in (0.5, 7, 49, 24 * 40, 24 * 800):
        later = AT + dt.timedelta(hours=hours)
        walked, t = None, c.next_after(AT)
        while t <= later:
            walked, t = t, c.next_after(t)
        assert c.latest_until(AT, later) == walked, (expr, hours)


def test_a_long_downtime_costs_no_more_than_a_short_one():
    import time

    c = cron.parse("* * * * * *", seconds=True)
    began = time.perf_counter()
    assert c.latest_until(AT, AT + dt.timedelta(days=365)) == AT.replace(microsecond=0) + dt.timedelta(days=365)
    assert time.perf_counter() - began < 0.05  # never a stall of the server's loop
