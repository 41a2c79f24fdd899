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
