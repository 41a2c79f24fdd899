"""`JobQueue`: the object a worker app defines, holding its task handlers and their policies.

    queue = JobQueue()

    @queue.task("send_email", max_attempts=5, backoff=Backoff(base=2), timeout=30)
    async def send_email(job): ...

`jobqueue-worker --app mymodule:queue` imports it and runs the handlers; `queue.client(dsn)`
gives producers a client whose enqueue applies the same per-type defaults.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from jobqueue.retry import Backoff

DEFAULT_MAX_ATTEMPTS = 4  # SPEC: three retries after the first attempt


@dataclass(frozen=True, slots=True)
class TaskDef:
    name: str
    handler: Callable[..., Any]
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float | None = None
    use_stored_result: bool = False
    is_async: bool = False


class JobQueue:
    def __init__(self, name: str = "jobqueue") -> None:
        self.name = name
        self.tasks: dict[str, TaskDef] = {}

    def task(self, name: str | None = None, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
             backoff: Backoff | None = None, timeout: float | None = None,
             use_stored_result: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler. It receives the `Job`; what it returns (JSON) is stored as the result.

        ``use_stored_result``: when a duplicate delivery finds a result already stored for the job
        (an earlier delivery finished but lost its lease), return that result instead of running
        the handler's side effects again.
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive")

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            task_name = name or handler.__name__
            if not task_name:
                raise ValueError("task name must not be empty")
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            self.tasks[task_name] = TaskDef(
                name=task_name, handler=handler, max_attempts=max_attempts,
                backoff=backoff or Backoff(), timeout=timeout, use_stored_result=use_stored_result,
                is_async=inspect.iscoroutinefunction(handler),
            )
            return handler

        return register

    def max_attempts_by_type(self) -> dict[str, int]:
        return {name: task.max_attempts for name, task in self.tasks.items()}
