"""The autoscaling rule and its cooldowns, on a stepped clock (no sleeping)."""

from __future__ import annotations

import pytest

from jobqueue.config import Settings, concurrency_range
from jobqueue.model.autoscale import DOWN, HOLD, UP, Rule, Scaler, depth_per_worker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "depth, utilization, expected",
    [
        (101, 0.5, UP),
        (100, 0.5, HOLD),  # depth per worker above 100: up; at 100: not
        (50, 0.91, UP),
        (50, 0.9, HOLD),  # utilization above 0.9: up
        (500, 0.0, UP),
        (5, 0.95, UP),  # either signal is enough to go up
        (9.9, 0.19, DOWN),
        (10, 0.1, HOLD),
        (5, 0.2, HOLD),  # down needs both below 10 and 0.2
        (0, 0.0, DOWN),
        (200, 0.1, UP),
        (5, 0.5, HOLD),
    ],
)
def test_direction(depth, utilization, expected):
    assert Rule().direction(depth, utilization) == expected


def test_next_moves_by_the_step_within_the_bounds():
    rule = Rule()
    assert rule.next(4, 500, 0.5, low=2, high=20) == 6
    assert rule.next(19, 500, 0.5, low=2, high=20) == 20
    assert rule.next(4, 0, 0.0, low=2, high=20) == 2
    assert rule.next(3, 0, 0.0, low=2, high=20) == 2
    assert rule.next(0, 0, 0.0, low=2, high=100) == 2  # no workers at all: the minimum
    assert rule.next(150, 50, 0.5, low=2, high=100) == 100  # outside the bounds: clamped even on hold
    assert Rule(step=4).next(4, 500, 0.5, low=2, high=20) == 8


def test_depth_per_worker_counts_against_one_worker_when_none_is_alive():
    assert depth_per_worker(300, 3) == 100
    assert depth_per_worker(300, 0) == 300


def test_scaler_starts_at_min_and_honours_the_cooldowns():
    clock = Clock()
    scaler = Scaler(2, 10, clock=clock)
    assert scaler.target == 2
    assert scaler.observe(500, 1.0) == 4  # the first move is not held back
    clock.now += 29.9
    assert scaler.observe(500, 1.0) == 4  # 30 s up cooldown
    clock.now += 0.1
    assert scaler.observe(500, 1.0) == 6
    clock.now += 60
    assert scaler.observe(0, 0.0) == 6  # a scale-up is not undone within 5 minutes
    clock.now += 240
    assert scaler.observe(0, 0.0) == 4  # 300 s after the last change
    clock.now += 30
    assert scaler.observe(500, 0.0) == 6  # up again 30 s after a change down
    for _ in range(10):
        clock.now += 30
        scaler.observe(500, 1.0)
    assert scaler.target == 10  # the max bounds it
    for _ in range(10):
        clock.now += 300
        scaler.observe(0, 0.0)
    assert scaler.target == 2  # the min bounds it
    clock.now += 1
    assert scaler.observe(50, 0.5) == 2  # hold


def test_holding_does_not_restart_a_cooldown():
    clock = Clock()
    scaler = Scaler(2, 10, clock=clock, up_cooldown=30)
    scaler.observe(500, 1.0)
    clock.now += 20
    scaler.observe(50, 0.5)  # hold: no change, no new cooldown
    clock.now += 10
    assert scaler.observe(500, 1.0) == 6


@pytest.mark.parametrize("low, high, up, down", [(0, 5, 30, 300), (6, 5, 30, 300), (1, 5, -1, 300), (1, 5, 30, -1)])
def test_bad_scaler_settings_are_refused(low, high, up, down):
    with pytest.raises(ValueError):
        Scaler(low, high, up_cooldown=up, down_cooldown=down)


@pytest.mark.parametrize(
    "kwargs", [dict(up_depth=10, down_depth=10), dict(up_utilization=1.5), dict(step=0), dict(down_utilization=0.95)]
)
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(ValueError):
        Rule(**kwargs)


def test_concurrency_takes_n_or_min_max():
    assert concurrency_range("8") == (0, 8)
    assert concurrency_range(" 2:20 ") == (2, 20)
    assert concurrency_range("4:4") == (0, 4)  # no range: fixed
    for bad in ("0", "5:2", "a:b", "2:", ":3", "1.5", "0:4"):
        with pytest.raises(ValueError, match="concurrency"):
            concurrency_range(bad)


def test_settings_from_env_read_the_range_and_the_autoscaling_knobs():
    settings = Settings.from_env(
        {
            "JOBQUEUE_CONCURRENCY": "2:16",
            "JOBQUEUE_AUTOSCALE_UP_COOLDOWN": "1",
            "JOBQUEUE_AUTOSCALE_DOWN_COOLDOWN": "2",
            "JOBQUEUE_AUTOSCALE_INTERVAL": "0.5",
            "JOBQUEUE_AUTOSCALE_STEP": "3",
            "JOBQUEUE_AUTOSCALE_MIN_WORKERS": "1",
            "JOBQUEUE_AUTOSCALE_MAX_WORKERS": "7",
        }
    )
    worker, autoscale = settings.worker, settings.autoscale
    assert (worker.concurrency_min, worker.concurrency, worker.autoscaling) == (2, 16, True)
    assert (
        autoscale.up_cooldown,
        autoscale.down_cooldown,
        autoscale.interval,
        autoscale.step,
        autoscale.min_workers,
        autoscale.max_workers,
    ) == (1, 2, 0.5, 3, 1, 7)
    assert Settings.from_env({"JOBQUEUE_CONCURRENCY": "6"}).worker.autoscaling is False
    with pytest.raises(ValueError, match="JOBQUEUE_CONCURRENCY"):
        Settings.from_env({"JOBQUEUE_CONCURRENCY": "9:3"})
    for bad in (
        {"JOBQUEUE_AUTOSCALE_INTERVAL": "0"},
        {"JOBQUEUE_AUTOSCALE_STEP": "0"},
        {"JOBQUEUE_AUTOSCALE_MIN_WORKERS": "5", "JOBQUEUE_AUTOSCALE_MAX_WORKERS": "4"},
        {"JOBQUEUE_AUTOSCALE_UP_COOLDOWN": "-1"},
    ):
        with pytest.raises(ValueError, match="(?i)autoscal"):
            Settings.from_env(bad)
