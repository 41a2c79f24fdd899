"""The exceptions jobqueue raises and the ones handlers raise to steer retries."""

from __future__ import annotations

import uuid

from jobqueue.model.durations import duration_problem


class JobQueueError(Exception):
    """Base of every error jobqueue raises on purpose."""


class ValidationError(JobQueueError, ValueError):
    """Bad input to enqueue (or any API): names the field; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class JobNotFound(JobQueueError, LookupError):
    def __init__(self, job_id: object) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class ScheduleNotFound(JobQueueError, LookupError):
    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(f"no schedule named {name!r}")


class LimitNotFound(JobQueueError, LookupError):
    def __init__(self, scope: object, name: object) -> None:
        self.scope = scope
        self.name = name
        super().__init__(f"no limit on {scope} {name!r}")


class CircuitNotFound(JobQueueError, LookupError):
    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(f"no circuit breaker named {name!r} (workers create them at start from queue.circuit(...))")


class QueueNotFound(JobQueueError, LookupError):
    """A pause or resume named a queue no worker ever served, no operator configured and no job is in."""

    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(
            f"no queue named {name!r} is known: no worker ever served it, no operator configured it and no "
            "job is in it (a misspelling?); to pause a queue before its first worker starts, force it "
            "(jobqueue queues pause --force, POST /queues/NAME/pause?force=true, pause_queue(force=True))"
        )


class DatabaseUnavailable(JobQueueError):
    """The database could not be reached, or the connection was lost before the operation's
    outcome came back. What a caller can rely on: when no statement was sent (no connection within
    the wait, the server refused to connect) nothing happened; once one was, it may have committed
    — a restart, a failover or a pooler can drop the connection between the commit and its reply.
    So repeat only what is safe to repeat: an enqueue with the same idempotency key (within the
    key's window the repeat returns the job the first try created, if it did), a cancel or an admin
    retry by id (a repeat answers with the state the first one left). Nothing is ever half done: a
    statement's writes commit together or not at all. `DatabaseBusy` is the case where the server
    answered."""


class DatabaseBusy(DatabaseUnavailable):
    """The server is up but gave this statement up for now — a deadlock, a lock or statement
    timeout — and nothing was committed (the server said so: its transaction rolled back).
    Retrying later works as for an outage (so it is one to callers that only retry), but another
    statement may well succeed right now."""


class QueueFull(DatabaseBusy):
    """The enqueue was refused to protect the queues, and nothing was written: ``reason`` is
    ``queue_full`` (``queue`` is at its hard limit), ``total_full`` (all queues together are) or
    ``too_many_queues`` (``queue`` is a new name and too many queues no worker serves already hold
    jobs). Over SQL it is SQLSTATE 53400 with the reason in DETAIL; it clears as workers drain the
    queues, so it is a `DatabaseBusy`: retrying later (with backoff) is the answer."""

    def __init__(self, message: str, reason: str, queue: str | None = None) -> None:
        self.reason = reason
        self.queue = queue
        super().__init__(message)


class PermissionDenied(JobQueueError):
    """The database refused the statement for want of a privilege (SQLSTATE 42501): the role
    jobqueue connects as lacks a GRANT. Nothing was done, and retrying will not help until an
    operator grants it."""


class JobFailed(JobQueueError):
    """`wait()` for a job that ended without a result: dead-lettered or cancelled. ``info`` is the
    job as it ended (its ``final_error`` and every attempt's ``errors``)."""

    def __init__(self, info: object) -> None:
        self.info = info
        self.job_id = getattr(info, "id", None)
        self.state = getattr(getattr(info, "state", None), "value", None)
        error = getattr(info, "final_error", None) or {}
        detail = f": {error.get('type')}: {error.get('message')}" if isinstance(error, dict) and error else ""
        super().__init__(f"job {self.job_id} ended {self.state}{detail}")


class WaitTimeout(JobQueueError, TimeoutError):
    """`wait()` gave up: the job had not finished within the timeout (it goes on regardless)."""


class Conflict(JobQueueError):
    """The change collides with the current state (e.g. an idempotency key a live job now holds)."""


class IdempotencyMismatch(Conflict):
    """A repeat submission with ``idempotency_mismatch="reject"`` whose job_type, queue or payload
    differ from those its idempotency key was first submitted with; nothing was written.
    ``job_id`` is the job holding the key (None if the server did not say)."""

    def __init__(self, message: str, job_id: uuid.UUID | None = None) -> None:
        self.field = "idempotency_key"
        self.job_id = job_id
        super().__init__(message)


class EncryptionError(JobQueueError):
    """An encrypted value could not be opened or made (`jobqueue.crypto.envelopes`): a worker that
    meets one fails the job at once, without retrying (another attempt would fail the same way)."""


class EncryptionKeyMissing(EncryptionError):
    """The value was encrypted under a key this process's key ring does not hold: give it the key
    ``key_id`` (JOBQUEUE_ENCRYPTION_KEYS), or re-wrap the jobs with `jobqueue keys rotate` first."""

    def __init__(self, key_id: str, where: str = "") -> None:
        self.key_id = key_id
        place = f" ({where})" if where else ""
        super().__init__(
            f"encryption key {key_id!r} is not in this process's key ring{place}: add it to "
            "JOBQUEUE_ENCRYPTION_KEYS (or JOBQUEUE_ENCRYPTION_KEYS_FILE) to decrypt"
        )


class EncryptionMismatch(EncryptionError):
    """An encrypted value that was not sealed for the job holding it: its associated data names
    another producer, job type, job id or field (a ciphertext copied from elsewhere), or it sits
    where no field is (in a list), or it was altered. The worker never opens it."""


class EncryptionUnbound(EncryptionError):
    """An encrypted value in the format of before migration 0025 (``"$jobqueue_enc": 1``), bound to
    no job: the worker does not open it; ``jobqueue keys rotate`` binds it to its job."""


class EncryptionUnavailable(EncryptionError):
    """Something must be encrypted but this process has no key ring: nothing was written."""


class NotMigrated(JobQueueError):
    """The database has no jobqueue schema (or an older one): run `jobqueue migrate`."""


class NotConnected(JobQueueError):
    """A task-style enqueue (``send_email.enqueue(...)``) found no database to write to: no
    ``client=``, no ``queue.connect(...)``, no JOBQUEUE_DSN. Nothing was written."""


# --- raised by handlers -----------------------------------------------------------------------


class Retry(Exception):
    """Raise from a handler to fail this attempt and run again after ``after`` seconds.

    Counts as an attempt: when no attempts remain the job is dead-lettered like any failure.
    ``after``: seconds, finite, from 0 to 3650 days (`jobqueue.model.durations`).
    """

    def __init__(self, after: float | None = None, reason: str = "retry requested") -> None:
        if after is not None and (problem := duration_problem(after, zero=True)):
            # refused here, in the handler that raised it (its attempt fails with this message):
            # inf, nan or a span past year 9999 would be stored as the job's run_at and wedge its row
            raise ValueError(f"Retry(after=...) {problem}")
        self.after = after
        self.reason = reason
        super().__init__(reason)


class PermanentError(Exception):
    """Raise from a handler when retrying cannot help (bad payload, auth, business rule).

    The job goes straight to ``dead_letter`` with its error history.
    """


class CircuitOpen(Exception):
    """Raise from a handler when its dependency is down: the task's circuit breaker opens at once,
    for every worker, and this job goes back to pending without using an attempt (it runs once the
    breaker closes). Only for tasks declared with ``circuit=``; raised from any other task it is an
    ordinary failed attempt."""

    def __init__(self, reason: str = "dependency unavailable") -> None:
        self.reason = reason
        super().__init__(reason)


class JobCancelled(Exception):
    """Raised into a handler that calls ``job.raise_if_cancelled()`` after a cancel request."""


class JobTimeout(Exception):
    """The handler ran past its task timeout: the attempt fails and is retried."""
