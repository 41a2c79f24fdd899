"""The LISTEN/NOTIFY channels jobqueue's SQL notifies, and what each payload names.

The SQL (``sql/queries``, and the functions and triggers of the migrations) spells them out as
literals; Python listens through these constants, and tests/unit/test_channel_names.py keeps the two
the same set. A notification is a hint (any login that may connect may NOTIFY anything): every
listener reads the database before acting on one.
"""

from __future__ import annotations

#: Jobs became claimable in a queue (payload: the queue): idle workers of it claim now.
JOBS = "jobqueue_jobs"
#: A running job was asked to stop (payload: the job id): its worker sets ``cancel_requested``.
CANCEL = "jobqueue_cancel"
#: A queue's settings changed, e.g. paused (payload: ``queue_settings``): workers reread them.
CONTROL = "jobqueue_control"
#: A circuit breaker changed (payload: its name, or '' for all): workers reload the breakers.
CIRCUITS = "jobqueue_circuits"
#: A global limit changed (payload: ''): workers reload the limits.
LIMITS = "jobqueue_limits"
#: A leader resigned its lease (payload: the lease's name): the other candidates elect at once.
LEADER = "jobqueue_leader"
#: A schedule may now fire earlier than planned (payload: its name): the scheduler wakes.
SCHEDULES = "jobqueue_schedules"
#: Job transitions, batched per statement (payload: compact event pieces): the job-event hub.
EVENTS = "jobqueue_events"

ALL = (JOBS, CANCEL, CONTROL, CIRCUITS, LIMITS, LEADER, SCHEDULES, EVENTS)
