"""An app that imports in the supervisor but not in its worker processes: a child that can never
start (as with a wrong DSN or a missing schema), to see the supervisor give up."""

import multiprocessing

from jobqueue import JobQueue

if multiprocessing.parent_process() is not None:
    raise RuntimeError("this worker process cannot start")

queue = JobQueue()
