"""Runs the elector and every maintenance service together, in a worker process or alone.

`jobqueue-worker` runs this beside its claim loop by default (`JOBQUEUE_MAINTENANCE=0` turns it
off); `jobqueue maintenance` runs it on its own. Whichever processes run it, one leads.
"""

from __future__ import annotations

import asyncio

from jobqueue import db
from jobqueue.config import Settings
from jobqueue.maintenance.base import Service
from jobqueue.maintenance.leader import Elector
from jobqueue.maintenance.sweeper import Sweeper
from jobqueue.notifier import Notifier


class Maintenance:
    def __init__(self, settings: Settings, notifier: Notifier, leader_id: str) -> None:
        self.pool = db.async_pool(settings.dsn, min_size=1, max_size=2, name=f"maintenance-{leader_id}")
        self.elector = Elector(self.pool, leader_id)
        notifier.subscribe("jobqueue_leader", self.elector.on_leader_notification)
        self.services: list[Service] = [Sweeper(self.pool, interval=settings.sweep_interval)]

    async def run(self) -> None:
        await self.pool.open(wait=False)
        tasks = [asyncio.create_task(self.elector.run(), name="elector")]
        tasks += [asyncio.create_task(s.run(lambda: self.elector.is_leader), name=s.name) for s in self.services]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.elector.resign()
            await self.pool.close()


async def run_standalone(settings: Settings) -> None:
    """`jobqueue maintenance`: the services without a claim loop, until SIGTERM/SIGINT."""
    import signal
    import socket
    import os

    notifier = Notifier(settings.dsn)
    maintenance = Maintenance(settings, notifier, f"{socket.gethostname()}:{os.getpid()}:maintenance")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(notifier.run()), asyncio.create_task(maintenance.run())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
