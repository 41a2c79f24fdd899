"""The threads sync handlers run on, and the ones that overran their deadline.

Python cannot kill a thread: a sync handler past its deadline has its attempt failed as a timeout,
but its thread runs on until the handler returns by itself — maybe never. So the worker keeps
``slots + max_stuck`` threads (started on demand): up to ``max_stuck`` of them may be stuck while
every slot still finds a free thread, and the slot a stuck handler held is free again at once.
`starving` says when one more stuck handler could leave a job waiting for a thread while its own
deadline runs; the worker then stops claiming and restarts its process cleanly (in place, or by
its supervisor), which is the only way to get the threads back. The threads are daemon threads, so
a stuck one never keeps a stopping process alive (``concurrent.futures`` joins its threads at exit,
which made SIGTERM hang forever behind a handler blocked for good).

An async handler that swallows the cancellation of its deadline is the same case on the event
loop: its task cannot be stopped either, so it is counted here too (`mark_stuck` takes its task),
in the same ``max_stuck``, until it returns by itself.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger("jobqueue.worker.threads")


class HandlerThreads:
    def __init__(self, slots: int, max_stuck: int, *, name: str = "jobqueue-handler") -> None:
        self.max_threads = slots + max_stuck
        self.max_stuck = max_stuck
        self._name = name
        self._lock = threading.Lock()
        self._started = 0
        self._idle: list[queue.SimpleQueue] = []  # the inboxes of threads waiting for work
        self._backlog: collections.deque = collections.deque()  # work no thread was free for
        self._stuck: set[concurrent.futures.Future | asyncio.Future] = set()

    @property
    def stuck(self) -> int:
        """Handlers past their deadline that are still running."""
        return len(self._stuck)

    @property
    def starving(self) -> bool:
        return len(self._stuck) >= self.max_stuck

    def submit(self, handler: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``handler(*args)`` on a thread, in a copy of the caller's context (its span)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        work = (future, contextvars.copy_context(), handler, args)
        with self._lock:
            if self._idle:
                self._idle.pop().put(work)
                return future
            if self._started >= self.max_threads:
                self._backlog.append(work)  # every thread is busy: the first one free takes it
                return future
            self._started += 1
            number = self._started
        threading.Thread(target=self._serve, args=(work,), daemon=True, name=f"{self._name}-{number}").start()
        return future

    def mark_stuck(self, future: concurrent.futures.Future | asyncio.Future) -> None:
        """The attempt running ``future`` (a thread's, or an async handler's task) passed its
        deadline and cannot be stopped; count it until it returns."""
        with self._lock:
            if future.done():
                return
            self._stuck.add(future)
        future.add_done_callback(self._unstick)

    def _unstick(self, future: concurrent.futures.Future | asyncio.Future) -> None:
        with self._lock:
            self._stuck.discard(future)
        log.info("a handler that overran its deadline returned at last; it is no longer counted stuck")

    def _serve(self, work: tuple) -> None:
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        while True:
            future, context, handler, args = work
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(context.run(handler, *args))
                except BaseException as exc:  # handed to the awaiting coroutine
                    future.set_exception(exc)
            with self._lock:
                if self._backlog:
                    work = self._backlog.popleft()
                    continue
                self._idle.append(inbox)
            work = inbox.get()
