"""The maintenance services' loop: what a failed run logs."""

from __future__ import annotations

import asyncio
import logging

from jobqueue.maintenance.base import Service
from jobqueue.model.errors import PermissionDenied


class Refused(Service):
    name = "sweeper"
    leader_only = False

    def __init__(self) -> None:
        super().__init__(interval=0.001, jitter=0)
        self.runs = 0

    async def run_once(self) -> int:
        self.runs += 1
        raise PermissionDenied("permission denied for table jobs")


def test_a_run_refused_for_want_of_a_grant_is_one_line_and_the_loop_goes_on(caplog):
    """Under a role without the grant every run logged a two-part traceback (and a worker under
    the wrong role printed one before its single `error:` line)."""
    service = Refused()

    async def main() -> None:
        loop = asyncio.create_task(service.run(lambda: False))
        while service.runs < 3:
            await asyncio.sleep(0.005)
        loop.cancel()

    with caplog.at_level(logging.ERROR, logger="jobqueue.maintenance"):
        asyncio.run(main())
    refused = [r for r in caplog.records if "permission denied for table jobs" in r.getMessage()]
    assert len(refused) >= 3 and all(r.exc_info is None for r in refused)
    assert refused[0].getMessage().startswith("sweeper: permission denied")


def _results() -> list[type]:
    """Every service's result type: the dataclass its `run_once` is annotated to return."""
    import importlib
    import inspect
    import pkgutil
    import typing

    import jobqueue.maintenance as package

    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Service) and cls is not Service and cls.__module__ == module.__name__:
                found.append(typing.get_type_hints(cls.run_once)["return"])
    return found


def test_every_service_result_says_in_words_what_it_did_and_never_counts_below_zero():
    """Issue 20: the loop logged ``scheduler: 1`` (one what?) and ``gatekeeper: -1`` at INFO every
    second. Each result now has a ``describe()`` the loop logs, its numbers in it, and a count that
    is 0 when a run did nothing worth a line."""
    import dataclasses

    results = _results()
    assert len(results) >= 8, results  # sweeper, scheduler, pruner, reaper, gatekeeper, historian, vacuumer, reindexer
    for result in results:
        idle = result()
        assert idle.count == 0, (result, idle.count)
        assert idle.describe() and "-1" not in idle.describe(), result
        busy = result(**{f.name: _busy(f.type) for f in dataclasses.fields(result)})
        assert busy.count > 0, result
        words = busy.describe()
        assert "7" in words and not words.strip().isdigit(), (result, words)


def _busy(annotation: str):
    return {"int": 7, "bool": True, "str | None": "jobs_claim_idx"}[annotation]


def test_the_loop_logs_a_run_that_did_something_at_info_and_an_idle_one_at_debug_only(caplog):
    from jobqueue.maintenance.scheduler import Fired

    class Firing(Service):
        name = "scheduler"

        def __init__(self) -> None:
            super().__init__(interval=0.001, jitter=0)
            self.runs = 0

        async def run_once(self) -> Fired:
            self.runs += 1
            return Fired(due=2, jobs=3) if self.runs == 1 else Fired()

    service = Firing()

    async def main() -> None:
        loop = asyncio.create_task(service.run(lambda: True))
        while service.runs < 20:
            await asyncio.sleep(0.002)
        loop.cancel()

    with caplog.at_level(logging.DEBUG, logger="jobqueue.maintenance"):
        asyncio.run(main())
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info == ["scheduler: enqueued 3 cron job(s) for 2 due schedule(s)"], info
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) >= 18 and set(debug) == {"scheduler: no schedule due"}, set(debug)
