"""The shop's neighbour (see `tests.support.shop_app`): same database, same queue, tasks named like
the shop's (``charge``, ``send_sms``) that declare no breaker and no limit, and one of its own."""

from __future__ import annotations

from jobqueue import JobQueue

queue = JobQueue()


@queue.task("charge")
async def charge(job):
    return {"charged_by": "billing"}


@queue.task("send_sms")
async def send_sms(job):
    return {"sent_by": "billing"}


@queue.task("report")
async def report(job):
    return {"reported_by": "billing"}
