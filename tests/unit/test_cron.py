"""Cron instants in a time zone: validation, daylight saving, misfire planning (no database)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from jobqueue.maintenance.scheduler import plan_fires
from jobqueue.model.cron import CronSchedule
from jobqueue.model.errors import ValidationError

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def fires(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The fires in [start, end)."""
    after = start - timedelta(microseconds=1)
    return list(itertools.takewhile(lambda t: t < end, CronSchedule(expression, zone).fires_after(after)))


def local(instants: list[datetime], zone=BERLIN) -> list[str]:
    return [t.astimezone(zone).strftime("%d %H:%M%z") for t in instants]


# --- daylight saving -------------------------------------------------------------------------------
# Europe/Berlin, 2024: clocks go 02:00 -> 03:00 on 31 March, 03:00 -> 02:00 on 27 October.

SPRING_DAY = (datetime(2024, 3, 30, 23, tzinfo=UTC), datetime(2024, 3, 31, 22, tzinfo=UTC))  # local 00:00-24:00
FALL_DAY = (datetime(2024, 10, 26, 22, tzinfo=UTC), datetime(2024, 10, 27, 23, tzinfo=UTC))


def test_spring_forward_a_skipped_wall_time_fires_once_at_the_jump():
    assert local(fires("30 2 * * *", "Europe/Berlin", *SPRING_DAY)) == ["31 03:00+0200"]


def test_spring_forward_ticks_inside_the_gap_collapse_into_one_fire():
    day = fires("*/20 * * * *", "Europe/Berlin", *SPRING_DAY)
    assert local(day)[5:9] == ["31 01:40+0100", "31 03:00+0200", "31 03:20+0200", "31 03:40+0200"]
    assert len(day) == 23 * 3 and len(set(day)) == len(day)  # 23 real hours, nothing doubled


def test_fall_back_a_repeated_wall_time_fires_once():
    assert local(fires("30 2 * * *", "Europe/Berlin", *FALL_DAY)) == ["27 02:30+0200"]
    assert local(fires("*/30 2 * * *", "Europe/Berlin", *FALL_DAY)) == ["27 02:00+0200", "27 02:30+0200"]


def test_fall_back_hourly_schedules_follow_real_time_through_the_repeated_hour():
    day = fires("0 * * * *", "Europe/Berlin", *FALL_DAY)
    assert len(day) == 25  # every real hour of a 25-hour day
    assert local(day)[2:5] == ["27 02:00+0200", "27 02:00+0100", "27 03:00+0100"]
    assert all(b - a == timedelta(hours=1) for a, b in zip(day, day[1:]))


def test_a_daily_schedule_fires_exactly_once_every_day_across_both_changes():
    for expression in ("30 2 * * *", "0 2 * * *", "59 1 * * *", "0 3 * * *", "15 0 * * *"):
        year = fires(expression, "Europe/Berlin", datetime(2024, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, tzinfo=UTC))
        days = [t.astimezone(BERLIN).date() for t in year]
        assert len(days) == len(set(days)) == 366, expression


def test_resuming_inside_the_repeated_hour_does_not_fire_it_again():
    second_pass = datetime(2024, 10, 27, 1, 10, tzinfo=UTC)  # 02:10 CET, after 02:10 CEST
    assert local([CronSchedule("45 2 * * *", "Europe/Berlin").next_after(second_pass)]) == ["28 02:45+0100"]
    assert local([CronSchedule("45 * * * *", "Europe/Berlin").next_after(second_pass)]) == ["27 02:45+0100"]


def reference(expression: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Fires by brute force, minute by minute in UTC: a matching local time fires on its first
    occurrence (every occurrence for hourly schedules); local times skipped by a jump fire at it."""
    hourly = expression.split()[1] == "*"
    out: set[datetime] = set()
    t = start  # on a whole minute
    previous = None
    while t < end:
        wall = t.astimezone(zone)
        naive = wall.replace(tzinfo=None)
        if croniter.match(expression, naive) and (wall.fold == 0 or hourly):
            out.add(t)
        if previous is not None and naive - previous > timedelta(minutes=1):  # clocks jumped forward
            skipped = previous + timedelta(minutes=1)
            while skipped < naive:
                if croniter.match(expression, skipped):
                    out.add(t)
                skipped += timedelta(minutes=1)
        previous = naive
        t += timedelta(minutes=1)
    return sorted(out)


@pytest.mark.parametrize(
    "zone, start",
    [
        ("Europe/Berlin", datetime(2024, 3, 30, 20, tzinfo=UTC)),
        ("Europe/Berlin", datetime(2024, 10, 26, 20, tzinfo=UTC)),
        ("America/New_York", datetime(2024, 3, 9, 20, tzinfo=UTC)),
        ("America/New_York", datetime(2024, 11, 2, 20, tzinfo=UTC)),
        ("Australia/Lord_Howe", datetime(2024, 10, 5, 10, tzinfo=UTC)),  # a 30-minute change
        ("Australia/Lord_Howe", datetime(2024, 4, 6, 10, tzinfo=UTC)),
    ],
)
@pytest.mark.parametrize("expression", ["*/7 * * * *", "30 2 * * *", "0,30 1-3 * * *", "15 * * * *", "45 1 * * *"])
def test_fires_match_a_minute_by_minute_reference_around_changes(zone, start, expression):
    end = start + timedelta(hours=14)  # each window holds a change and the 02:30 around it
    assert fires(expression, zone, start, end) == reference(expression, ZoneInfo(zone), start, end)


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, message",
    [
        ("61 * * * *", "out of range"),
        ("* * *", "must have 5 fields"),
        ("* * * * * * *", "got 7"),
        ("bogus", "must have 5 fields"),
        ("", "must be a cron expression"),
        ("@reboot", "unknown alias"),
        ("0 0 30 2 *", "never fires"),
        (None, "must be a cron expression"),
    ],
)
def test_invalid_expressions_are_refused_naming_the_field(expression, message):
    with pytest.raises(ValidationError) as info:
        CronSchedule(expression)
    assert info.value.field == "cron" and message in info.value.message


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "CEST", "+02:00", None])
def test_invalid_zones_are_refused_naming_the_field(zone):
    with pytest.raises(ValidationError) as info:
        CronSchedule("* * * * *", zone)
    assert info.value.field == "timezone"


def test_six_fields_have_seconds_last_and_aliases_work():
    start = datetime(2024, 1, 1, tzinfo=UTC)
    assert CronSchedule("* * * * * 30").next_after(start) == start + timedelta(seconds=30)
    assert CronSchedule("@HOURLY").next_after(start) == start + timedelta(hours=1)
    assert CronSchedule("  */5   * * * * ").expression == "*/5 * * * *"


# --- misfire planning ------------------------------------------------------------------------------

EVERY_MINUTE = CronSchedule("* * * * *")
T0 = datetime(2024, 1, 1, 12, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def plan(policy: str, *, next_fire_at=T0, now=T0 + timedelta(minutes=10, seconds=5), limit=100):
    return plan_fires(
        EVERY_MINUTE, next_fire_at=next_fire_at, anchor=T0, now=now, policy=policy, limit=limit, grace=GRACE
    )


def test_on_time_ticks_fire_whatever_the_policy():
    for policy in ("fire_once", "fire_all", "skip"):
        p = plan(policy, now=T0 + timedelta(seconds=30))
        assert p.ticks == [T0] and p.next_fire_at == T0 + timedelta(minutes=1) and p.missed_from is None


def test_after_an_outage_fire_once_fires_the_latest_missed_tick_and_the_on_time_one():
    p = plan("fire_once")  # ticks 12:00..12:10 due; 12:10 is within the grace, the rest missed
    assert p.ticks == [T0 + timedelta(minutes=9), T0 + timedelta(minutes=10)]
    assert p.missed_from == T0 and p.next_fire_at == T0 + timedelta(minutes=11)


def test_after_an_outage_fire_all_fires_every_missed_tick_up_to_the_limit():
    assert plan("fire_all").ticks == [T0 + timedelta(minutes=m) for m in range(11)]
    assert plan("fire_all", limit=3).ticks == [T0 + timedelta(minutes=m) for m in (7, 8, 9, 10)]


def test_after_an_outage_skip_fires_only_the_on_time_tick():
    assert plan("skip").ticks == [T0 + timedelta(minutes=10)]


def test_a_new_schedule_starts_after_its_anchor():
    p = plan_fires(
        EVERY_MINUTE,
        next_fire_at=None,
        anchor=T0 + timedelta(seconds=1),
        now=T0 + timedelta(seconds=2),
        policy="fire_once",
        limit=1,
        grace=GRACE,
    )
    assert p.ticks == [] and p.next_fire_at == T0 + timedelta(minutes=1)


def test_a_long_outage_of_a_per_second_schedule_is_planned_without_walking_every_tick():
    every_second = CronSchedule("* * * * * *")
    p = plan_fires(
        every_second, next_fire_at=T0, anchor=T0, now=T0 + timedelta(days=30), policy="fire_all", limit=5, grace=GRACE
    )
    assert len(p.ticks) == 5 + 61
    assert p.ticks[4] == T0 + timedelta(days=30) - GRACE - timedelta(seconds=1)
