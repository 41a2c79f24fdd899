"""One of two apps that share a database and a queue (issue 17, §5): a shop whose ``charge`` calls
a payments API behind a circuit breaker and whose ``send_sms`` is rate-limited. Its neighbour,
`tests.support.billing_app`, has tasks of the same names without either. Both are unnamed
``JobQueue()``s, as a new user writes them: each is known by its module."""

from __future__ import annotations

from jobqueue import JobQueue

queue = JobQueue()

queue.circuit("payments-api", threshold=5, window=60, reset_after=30)
queue.queue_limit("exports", concurrency=2)


@queue.task("charge", circuit="payments-api")
async def charge(job):
    return {"charged_by": "shop"}


@queue.task("send_sms", rate="100/m")
async def send_sms(job):
    return {"sent_by": "shop"}


@queue.task("greet")
async def greet(job):
    return {"greeted_by": "shop"}
