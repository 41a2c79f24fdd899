"""`Middleware`: a generator function that wraps every attempt — the code before its one ``yield``
runs before the handler, the code after it once the attempt has an outcome, which the ``yield``
returns:

    @queue.middleware
    def log_attempts(job):
        started = time.monotonic()
        outcome = yield
        log.info("%s %s: %s in %.3fs", job.job_type, job.id, outcome.status, time.monotonic() - started)

A plain generator (``def`` … ``yield``) or an async one (``async def`` … ``yield``), so one shape
covers before, after and on failure (check ``outcome.status``), the way Celery's task_prerun /
task_postrun / task_failure signals and Oban's telemetry events are used, and a ``with`` block
around the ``yield`` (a span, a log context) covers the attempt.

This module only drives the generators (`enter`, `exit`, `close`); what an exception raised by
one does to the attempt — it is the attempt's exception, classified as a handler's would be — is
`jobqueue.worker.executor`'s. Nothing here imports jobqueue: the value sent in is whatever the
executor sends (an `AttemptOutcome`).
"""

from __future__ import annotations

import inspect
from typing import Any, AsyncGenerator, Callable, Generator

Entered = Generator[None, Any, None] | AsyncGenerator[None, Any]


class Middleware:
    __slots__ = ("function", "name", "is_async")

    def __init__(self, function: Callable[..., Any]) -> None:
        """Refuses, with one line at import, a function that is not a generator function: an
        ordinary function or a context manager object would otherwise fail on every attempt."""
        self.name = getattr(function, "__qualname__", None) or repr(function)
        if inspect.isasyncgenfunction(function):
            self.is_async = True
        elif inspect.isgeneratorfunction(function):
            self.is_async = False
        else:
            raise TypeError(
                f"middleware {self.name} must be a generator function (def or async def with one `yield` "
                "where the attempt runs), not a plain function"
            )
        self.function = function

    async def enter(self, job: Any) -> Entered:
        """Run it up to its ``yield``; the generator to `exit` later."""
        generator = self.function(job)
        try:
            if self.is_async:
                await generator.__anext__()
            else:
                next(generator)
        except (StopIteration, StopAsyncIteration):
            raise RuntimeError(f"middleware {self.name} returned before its `yield`: it must yield once") from None
        return generator

    async def exit(self, generator: Entered, outcome: Any) -> None:
        """Send ``outcome`` in (what its ``yield`` returns) and run it to its end."""
        try:
            if self.is_async:
                await generator.asend(outcome)  # type: ignore[union-attr]
            else:
                generator.send(outcome)  # type: ignore[union-attr]
        except (StopIteration, StopAsyncIteration):
            return
        await self.close(generator)
        raise RuntimeError(f"middleware {self.name} yielded more than once: it must yield once")

    async def close(self, generator: Entered) -> None:
        """End it without an outcome (the attempt was given back at shutdown): `GeneratorExit` is
        raised at its ``yield``, so its ``finally`` and ``with`` blocks run."""
        if self.is_async:
            await generator.aclose()  # type: ignore[union-attr]
        else:
            generator.close()  # type: ignore[union-attr]
