"""Cron expressions, in UTC: what a schedule's ``spec.schedule`` says (docs/watching.md,
Schedules). Five fields, ``minute hour day-of-month month day-of-week``, as a Kubernetes
CronJob takes them (``*``, ``a-b``, ``*/n``, ``a-b/n``, lists, month and day names, day 7 is
Sunday; when both day fields are restricted a day matching either is a day), and the macros
``@yearly`` ``@annually`` ``@monthly`` ``@weekly`` ``@daily`` ``@midnight`` ``@hourly``.
With ``seconds=True`` (a test's server only: ``c.NBValidation.schedule_seconds_field``) a
sixth field in front counts seconds. Pure: the standard library only."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
#: (name, low, high, names) of each field, seconds first (used only with seconds=True)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("second", 0, 59, {}), ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_UTC = _dt.timezone.utc


class CronError(ValueError):
    """A cron expression that cannot be read: the message says which field and why."""


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the allowed values of each field (sorted)."""

    text: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 Sunday .. 6 Saturday
    any_day: bool  # day of month is "*"
    any_weekday: bool  # day of week is "*"

    def _day_ok(self, d: _dt.date) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return dow
        if self.any_weekday:
            return dom
        return dom or dow  # both restricted: either (cron's rule)

    def next_after(self, after: _dt.datetime) -> _dt.datetime:
        """The first time this expression names strictly after ``after`` (UTC, aware)."""
        t = after.astimezone(_UTC).replace(microsecond=0) + _dt.timedelta(seconds=1)
        day = t.date()
        first = True
        for _ in range(366 * 8):  # a leap day on a given weekday comes at least once in 28 years; enough here
            if self._day_ok(day):
                found = self._in_day(day, t if first else None)
                if found is not None:
                    return found
            day += _dt.timedelta(days=1)
            first = False
        raise CronError(f"{self.text!r} names no time in the next eight years")

    def _in_day(self, day: _dt.date, start: _dt.datetime | None) -> _dt.datetime | None:
        h0, m0, s0 = (start.hour, start.minute, start.second) if start is not None else (0, 0, 0)
        for h in self.hours:
            if h < h0:
                continue
            for m in self.minutes:
                if h == h0 and m < m0:
                    continue
                for s in self.seconds:
                    if h == h0 and m == m0 and s < s0:
                        continue
                    return _dt.datetime(day.year, day.month, day.day, h, m, s, tzinfo=_UTC)
                # (no second left in minute m0 of hour h0: the next minute)
            # (no minute left: the next hour)
        return None

    def latest_until(self, after: _dt.datetime, now: _dt.datetime) -> _dt.datetime | None:
        """The last tick in (``after``, ``now``], None when there is none: the one catch-up run
        of the ticks missed while nobody was looking (never one run per missed tick). Found
        walking back from ``now``, so a long downtime costs no more than a short one."""
        end = now.astimezone(_UTC).replace(microsecond=0)
        start = after.astimezone(_UTC)
        day = end.date()
        first = True
        while day >= start.date():
            if self._day_ok(day):
                found = self._last_in_day(day, end if first else None)
                if found is not None:
                    return found if found > start else None
            day -= _dt.timedelta(days=1)
            first = False
        return None

    def _last_in_day(self, day: _dt.date, end: _dt.datetime | None) -> _dt.datetime | None:
        h1, m1, s1 = (end.hour, end.minute, end.second) if end is not None else (23, 59, 59)
        for h in reversed(self.hours):
            if h > h1:
                continue
            for m in reversed(self.minutes):
                if h == h1 and m > m1:
                    continue
                for s in reversed(self.seconds):
                    if h == h1 and m == m1 and s > s1:
                        continue
                    return _dt.datetime(day.year, day.month, day.day, h, m, s, tzinfo=_UTC)
        return None


def _values(field: str, low: int, high: int, names: dict[str, int], text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{field}: an empty item in {text!r}")
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{field}: the step {step_text!r} must be a whole number above 0")
            step = int(step_text)
        if rng == "*":
            lo, hi = low, high
        else:
            a, dash, b = rng.partition("-")
            lo = _one(field, low, high, names, a)
            hi = _one(field, low, high, names, b) if dash else (high if step_text else lo)
            if hi < lo:
                raise CronError(f"{field}: the range {rng!r} runs backwards")
        out.update(range(lo, hi + 1, step))
    return out


def _one(field: str, low: int, high: int, names: dict[str, int], text: str) -> int:
    key = text.lower()
    if key in names:
        return names[key]
    if not text.isdigit():
        raise CronError(f"{field}: {text!r} is not a number" + (" or a name" if names else ""))
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{field}: {value} is outside {low}-{high}")
    return value


def parse(text: str, seconds: bool = False) -> Cron:
    """``text`` as a :class:`Cron`, or :class:`CronError` naming the field and the reason."""
    if not isinstance(text, str) or not text.strip():
        raise CronError("an empty expression: give five fields (minute hour day-of-month month day-of-week) or "
                        "a macro such as @daily")
    expr = text.strip()
    if expr.startswith("@"):
        if expr.lower() not in MACROS:
            raise CronError(f"unknown macro {expr!r}; known: {', '.join(sorted(MACROS))}")
        expr = MACROS[expr.lower()]
        fields = ["0", *expr.split()]
    else:
        fields = expr.split()
        want = 6 if seconds else 5
        if seconds and len(fields) == 5:
            fields = ["0", *fields]
        elif len(fields) != want:
            raise CronError(f"{len(fields)} fields; a cron expression has five: minute hour day-of-month month "
                            "day-of-week (in UTC)")
        if not seconds:
            fields = ["0", *fields]
    got = [_values(name, lo, hi, names, f) for (name, lo, hi, names), f in zip(_FIELDS, fields, strict=True)]
    weekdays = {d % 7 for d in got[5]}
    return Cron(text=text, seconds=tuple(sorted(got[0])), minutes=tuple(sorted(got[1])),
                hours=tuple(sorted(got[2])), days=frozenset(got[3]), months=frozenset(got[4]),
                weekdays=frozenset(weekdays), any_day=fields[3].startswith("*"), any_weekday=fields[5].startswith("*"))
