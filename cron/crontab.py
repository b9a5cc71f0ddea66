"""Classic five-field crontab expressions, checked and translated for APScheduler 3.

An operator writes the crontab they know (``minute hour day-of-month month
day-of-week``, or a macro such as ``@daily``). Two things differ in APScheduler
3 and are settled here, before an expression reaches the scheduler:

* Day-of-week numbers: crontab counts 0 (and 7) as Sunday; APScheduler 3's
  ``CronTrigger.from_crontab`` counts 0 as Monday. Numbers are rewritten as
  day names, which both agree on.
* Restricting both day-of-month and day-of-week: classic cron fires when
  *either* matches (``0 9 1-7 * 1`` is 09:00 on the 1st to the 7th, and on
  every Monday), APScheduler only when *both* do. Here it keeps the classic
  meaning: :meth:`Crontab.alternatives` gives the two expressions, one per
  day field, and the scheduler fires at whichever comes first. As in classic
  cron, a day field that starts with ``*`` (``*/2``) does not count as
  restricted: then both must match.

Every refusal is a :class:`ValueError` whose message names the field and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = {"minute": (0, 59), "hour": (0, 23), "day-of-month": (1, 31), "month": (1, 12)}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ITEM = re.compile(r"^(?P<range>\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/(?P<step>[0-9]+))?$")


@dataclass(frozen=True, slots=True)
class Crontab:
    """A checked expression: the five fields, day-of-week already in names."""

    minute: str
    hour: str
    day: str
    month: str
    day_of_week: str
    either_day: bool = False

    def expression(self) -> str:
        """The five fields joined, as ``CronTrigger.from_crontab`` takes them."""
        return f"{self.minute} {self.hour} {self.day} {self.month} {self.day_of_week}"

    def alternatives(self) -> tuple[str, ...]:
        """The expressions whose fire times together are this one's, for the scheduler.

        One, unless both day fields are restricted: then one per day field
        (classic cron fires when either matches; APScheduler needs both).
        """
        if not self.either_day:
            return (self.expression(),)
        start = f"{self.minute} {self.hour}"
        return (
            f"{start} {self.day} {self.month} *",
            f"{start} * {self.month} {self.day_of_week}",
        )

    @property
    def hour_is_fixed(self) -> bool:
        """True when the hour field restricts hours (not ``*``): a wall-clock-time job."""
        return self.hour != "*"


def parse(expr: str) -> Crontab:
    """Check a crontab expression and translate it for APScheduler 3."""
    text = " ".join(expr.split()).lower()
    if not text:
        raise ValueError("is empty; give five fields (minute hour day-of-month month day-of-week)")
    if text.startswith("@"):
        if text not in MACROS:
            raise ValueError(f"{text!r} is not a known macro (known: {', '.join(sorted(MACROS))})")
        text = MACROS[text]
    fields = text.split(" ")
    if len(fields) != 5:
        raise ValueError(
            f"{expr!r} has {len(fields)} fields; a cron expression has 5 "
            "(minute hour day-of-month month day-of-week) or is a macro such as @daily"
        )
    minute, hour, day, month, dow = fields
    for name, value in zip(FIELD_NAMES[:4], (minute, hour, day, month), strict=True):
        _check_numeric_field(name, value)
    weekdays = _translate_weekdays(dow)
    # Classic cron: a day field starting with "*" is unrestricted, and then both must
    # match; with both restricted, either one does.
    either = not day.startswith("*") and not dow.startswith("*")
    return Crontab(
        minute=minute, hour=hour, day=day, month=month, day_of_week=weekdays, either_day=either
    )


def _check_numeric_field(name: str, value: str) -> None:
    low, high = _BOUNDS[name]
    for item in value.split(","):
        match = _ITEM.match(item)
        if match is None:
            raise ValueError(f"{name} field {value!r}: {item!r} is not N, N-M, * or a /step of one")
        _check_step(name, value, match.group("step"))
        span = match.group("range")
        if span == "*":
            continue
        for part in span.split("-"):
            number = _number(part, name)
            if number is None:
                raise ValueError(f"{name} field {value!r}: {part!r} is not a number")
            if not low <= number <= high:
                raise ValueError(f"{name} field {value!r}: {number} is outside {low}-{high}")
        ends = [_number(p, name) for p in span.split("-")]
        if len(ends) == 2 and ends[0] is not None and ends[1] is not None and ends[0] > ends[1]:
            raise ValueError(f"{name} field {value!r}: range {span} runs backwards")


def _number(part: str, name: str) -> int | None:
    if part.isdigit():
        return int(part)
    if name == "month" and part in _MONTHS:
        return _MONTHS.index(part) + 1
    return None


def _check_step(name: str, value: str, step: str | None) -> None:
    if step is not None and int(step) == 0:
        raise ValueError(f"{name} field {value!r}: a step of 0 never advances")


def _translate_weekdays(value: str) -> str:
    """Rewrite day-of-week numbers (crontab: 0 and 7 are Sunday) as day names."""
    if value == "*":
        return value
    days: list[int] = []
    for item in value.split(","):
        match = _ITEM.match(item)
        if match is None:
            raise ValueError(
                f"day-of-week field {value!r}: {item!r} is not N, N-M, a day name, * or a /step"
            )
        step_text = match.group("step")
        _check_step("day-of-week", value, step_text)
        step = int(step_text) if step_text else 1
        span = match.group("range")
        if span == "*":
            first, last = 0, 6
        else:
            ends = [_weekday(part, value) for part in span.split("-")]
            first, last = ends[0], ends[-1]
            if step_text and len(ends) == 1:
                last = 6
            if first > last and not (last == 0 and len(ends) == 2):
                raise ValueError(f"day-of-week field {value!r}: range {span} runs backwards")
            if len(ends) == 2 and last == 0 and first > 0:
                last = 7  # "5-7" / "fri-sun": Sunday written as 7 closes the week
        days.extend(day % 7 for day in range(first, last + 1, step))
    ordered = sorted(set(days))
    return ",".join(CRON_DAYS[day] for day in ordered)


def _weekday(part: str, value: str) -> int:
    if part.isdigit():
        number = int(part)
        if number > 7:
            raise ValueError(
                f"day-of-week field {value!r}: {number} is outside 0-7 (0 and 7 = Sun)"
            )
        return number
    if part in CRON_DAYS:
        return CRON_DAYS.index(part)
    raise ValueError(f"day-of-week field {value!r}: {part!r} is not a day number or name")
