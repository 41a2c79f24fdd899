"""Cron expressions in a time zone: validation, and the exact instants a schedule fires.

Expressions use croniter's syntax: 5 fields (minute hour day-of-month month day-of-week), or 6
with croniter's seconds field last, or an alias (@hourly, @daily/@midnight, @weekly, @monthly,
@yearly/@annually). They are read as wall-clock times in the schedule's IANA time zone, and
daylight-saving changes follow ISC cron's rule, so no fire is skipped and none doubled:

- spring forward: a wall-clock time the clocks jump over (02:30 when 02:00 becomes 03:00) fires
  once, at the jump;
- fall back: a wall-clock time that happens twice fires the first time only — except in
  schedules whose hour field is ``*`` (hourly and finer), which follow real time and fire in both
  passes of the repeated hour, since those are two different hours.

croniter walks naive wall-clock times; `CronSchedule` maps them onto instants one stretch of
constant UTC offset at a time, so the instants it yields are strictly increasing.
"""

from __future__ import annotations

import functools
import itertools
import zoneinfo
from datetime import datetime, timedelta, timezone
from typing import Iterator

from croniter import CroniterError, croniter

from jobqueue.model.errors import ValidationError

UTC = timezone.utc
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MICROSECOND = timedelta(microseconds=1)
_PROBE = timedelta(days=1)  # UTC offsets are sampled this far apart when looking for the next change


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def time_zone(name: object) -> zoneinfo.ZoneInfo:
    """The IANA time zone called ``name``; anything else is a ValidationError on ``timezone``."""
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("timezone", "must be an IANA time zone name such as Europe/Berlin or UTC")
    if name != "UTC" and name not in _zone_names():
        raise ValidationError("timezone", f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC")
    return zoneinfo.ZoneInfo(name)


def normalise_expression(expression: object) -> str:
    """The expression with single spaces (aliases lower-cased), or a ValidationError on ``cron``."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError("cron", "must be a cron expression such as '*/5 * * * *'")
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in ALIASES:
            raise ValidationError("cron", f"unknown alias {text!r}: use one of {', '.join(ALIASES)}")
        return text.lower()
    fields = len(text.split(" "))
    if fields not in (5, 6):
        raise ValidationError(
            "cron", f"must have 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds last), got {fields}"
        )
    try:
        croniter(text)
    except (CroniterError, ValueError, KeyError) as exc:
        raise ValidationError("cron", f"{text!r} is not a valid cron expression ({exc})") from None
    return text


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("cron times must be timezone-aware")
    return moment.astimezone(UTC)


class CronSchedule:
    """A validated expression in a zone; yields the instants (UTC) at which it fires."""

    def __init__(self, expression: object, zone: object = "UTC") -> None:
        self.expression = normalise_expression(expression)
        self.zone = time_zone(zone)
        hours = croniter(self.expression).expanded[1]
        #: hour field matches every hour: the schedule follows real time through a repeated hour.
        self.hourly = hours == ["*"] or len(set(hours)) == 24
        try:
            self.next_after(datetime.now(UTC))
        except CroniterError:
            raise ValidationError("cron", f"{self.expression!r} never fires") from None

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, {self.zone.key!r})"

    # --- the instants --------------------------------------------------------------------------

    def fires_after(self, after: datetime) -> Iterator[datetime]:
        """Every instant the schedule fires strictly after ``after``, ascending, without end."""
        current = _utc(after)
        floor = self._repeat_floor(current)  # wall-clock time to resume from inside a repeated hour
        inclusive = False
        while True:
            offset = self._offset(current)
            start = self._wall(current, offset)
            if floor is not None and floor > start:
                start, inclusive = floor, True
            ticks = croniter(self.expression, start - _MICROSECOND if inclusive else start)
            while True:
                wall = ticks.get_next(datetime)
                instant = (wall - offset).replace(tzinfo=UTC)
                change = self._next_change(current, instant, offset)
                if change is None:
                    yield instant
                    current = instant
                    continue
                new_offset = self._offset(change)
                if new_offset > offset and wall < self._wall(change, new_offset):
                    yield change  # the clocks jumped over this wall-clock time: fire at the jump
                    current, inclusive, floor = change, False, None
                elif new_offset > offset or self.hourly:
                    current, inclusive, floor = change, True, None
                else:  # fall back: skip the wall-clock times this stretch already went through
                    current, inclusive, floor = change, True, self._wall(change, offset)
                break

    def next_after(self, after: datetime) -> datetime:
        return next(self.fires_after(after))

    def between(self, low: datetime, high: datetime) -> list[datetime]:
        """The instants in [low, high]."""
        return list(itertools.takewhile(lambda t: t <= high, self.fires_after(low - _MICROSECOND)))

    def latest(self, low: datetime, high: datetime, count: int) -> list[datetime]:
        """Up to ``count`` of the latest instants in [low, high), ascending, without walking the
        whole range: a long outage of a per-second schedule costs O(count), not O(ticks missed)."""
        window = timedelta(minutes=1)
        while True:
            start = max(low, high - window)
            found = list(itertools.takewhile(lambda t: t < high, self.fires_after(start - _MICROSECOND)))
            if len(found) >= count or start == low:
                return found[-count:] if count else []
            window *= 4

    # --- time zone arithmetic ----------------------------------------------------------------------

    def _offset(self, instant: datetime) -> timedelta:
        return instant.astimezone(self.zone).utcoffset()  # type: ignore[return-value]

    @staticmethod
    def _wall(instant: datetime, offset: timedelta) -> datetime:
        return (instant + offset).replace(tzinfo=None)

    def _next_change(self, start: datetime, end: datetime, offset: timedelta) -> datetime | None:
        """The first instant in (start, end] whose UTC offset is not ``offset`` (None: none).

        Offsets are sampled a day apart, then the change is narrowed to the second (transitions
        fall on whole seconds)."""
        probe = start
        while probe < end:
            step = min(probe + _PROBE, end)
            if self._offset(step) != offset:
                low, high = int(probe.timestamp()), int(step.timestamp()) + 1
                while high - low > 1:
                    middle = (low + high) // 2
                    if self._offset(datetime.fromtimestamp(middle, UTC)) == offset:
                        low = middle
                    else:
                        high = middle
                return datetime.fromtimestamp(high, UTC)
            probe = step
        return None

    def _repeat_floor(self, instant: datetime) -> datetime | None:
        """Inside the second pass of a repeated hour, the wall-clock time where it ends — a
        non-hourly schedule already fired everything before it in the first pass."""
        local = instant.astimezone(self.zone)
        if not local.fold or self.hourly:
            return None
        first_pass = local.replace(fold=0).astimezone(UTC)
        offset = self._offset(first_pass)
        change = self._next_change(first_pass, instant, offset)
        return None if change is None else self._wall(change, offset)
