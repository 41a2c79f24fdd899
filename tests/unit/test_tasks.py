"""What ``@queue.task`` returns (`jobqueue.tasks.Task`), without a database: still the function, its
enqueue-side defaults checked at import, and task-style enqueues refused — with one line, before
anything is sent — when they are ambiguous or have nowhere to go."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

from jobqueue import AsyncClient, Client, JobQueue
from jobqueue.client.validation import NewJob
from jobqueue.model.errors import NotConnected, ValidationError
from jobqueue.tasks import ENQUEUE_OPTIONS, Task


def app_with_tasks() -> tuple[JobQueue, Task, Task]:
    app = JobQueue("task-tests")

    @app.task("send_email", queue="mail", priority="high", max_attempts=5)
    async def send_email(job):
        """Sends the email."""
        return {"to": job}

    @app.task()
    def resize(job, factor=2):
        return job * factor

    return app, send_email, resize


def test_the_decorated_task_is_still_the_function():
    app, send_email, resize = app_with_tasks()
    assert isinstance(send_email, Task) and send_email.name == "send_email" and resize.name == "resize"
    assert resize(3) == 6 and resize(3, factor=3) == 9
    assert asyncio.run(send_email("a@b.c")) == {"to": "a@b.c"}
    assert send_email.__name__ == "send_email" and send_email.__doc__ == "Sends the email."
    assert asyncio.iscoroutinefunction(send_email) and not asyncio.iscoroutinefunction(resize)
    if sys.version_info >= (3, 12):  # inspect recognises a marked callable from 3.12 on
        assert inspect.iscoroutinefunction(send_email) and not inspect.iscoroutinefunction(resize)
    assert app.tasks["send_email"].handler is send_email.__wrapped__  # the worker runs the function itself
    assert (app.tasks["send_email"].queue, app.tasks["send_email"].priority) == ("mail", "high")
    assert (app.tasks["resize"].queue, app.tasks["resize"].priority) == ("default", "normal")


def test_a_task_of_one_app_registered_in_another_is_its_function_there():
    _, send_email, _ = app_with_tasks()
    other = JobQueue("other")
    again = other.task("send_email")(send_email)
    assert other.tasks["send_email"].handler is send_email.handler and other.tasks["send_email"].is_async
    assert other.tasks["send_email"].queue == "default" and again is not send_email


@pytest.mark.parametrize(
    "options, field",
    [
        (dict(queue=""), "queue"),
        (dict(queue="x" * 300), "queue"),
        (dict(priority="urgent"), "priority"),
        (dict(priority=7), "priority"),
        (dict(priority=float("nan")), "priority"),
    ],
)
def test_bad_task_defaults_are_refused_at_import_naming_the_field(options, field):
    app = JobQueue("bad-defaults")
    with pytest.raises(ValidationError) as info:
        app.task("t", **options)
    assert info.value.field == field
    assert not app.tasks


def test_periodic_jobs_go_where_their_tasks_jobs_go_unless_told():
    app = JobQueue("periodic-defaults")

    @app.periodic("* * * * *")
    @app.task("report", queue="reports", priority="low")
    async def report(job):
        return None

    @app.periodic("0 * * * *", name="hourly-report", queue="default", priority="critical")
    def hourly(job):
        return None

    assert isinstance(report, Task) and isinstance(hourly, Task)
    assert (app.schedules["report"].queue, app.schedules["report"].priority) == ("reports", "low")
    assert (app.schedules["hourly-report"].queue, app.schedules["hourly-report"].priority) == ("default", "critical")
    with pytest.raises(ValidationError) as info:  # an empty queue is refused, not taken for "the task's"
        app.periodic("* * * * *", name="bad", queue="")(report)
    assert info.value.field == "queue"
    assert app.queues_not_served(["default"]) == {"reports": ["task report", "schedule report"]}
    assert app.queues_not_served(["default", "reports"]) == {}


def test_the_options_a_task_passes_on_are_exactly_what_enqueue_takes():
    accepted = {
        name
        for name, parameter in inspect.signature(NewJob.build).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert ENQUEUE_OPTIONS == (accepted - {"field_prefix", "producer_id"}) | {"encrypt", "producer_id"}


def test_ambiguous_enqueues_are_refused_before_anything_is_sent():
    _, send_email, _ = app_with_tasks()
    with pytest.raises(TypeError, match="'priority' is an enqueue option, not a payload field"):
        send_email.enqueue_sync(to="a@b.c", priority="low")
    with pytest.raises(TypeError, match="as keywords or as one positional value, not both"):
        send_email.enqueue_sync({"to": "a@b.c"}, cc="d@e.f")
    with pytest.raises(TypeError, match="unknown option 'prio'"):
        send_email.with_options(prio="low")
    with pytest.raises(TypeError, match="needs a Client"):
        send_email.with_options(client=object()).enqueue_sync(to="a@b.c")
    with pytest.raises(TypeError, match="needs an AsyncClient"):
        asyncio.run(send_email.with_options(client=Client("postgresql://nowhere/x")).enqueue(to="a@b.c"))


def test_without_a_database_a_task_style_enqueue_says_how_to_give_one():
    """The test suite's autouse fixture removes JOBQUEUE_DSN: nothing names a database."""
    _, send_email, _ = app_with_tasks()
    with pytest.raises(NotConnected, match=r"task 'send_email' has no database: call queue.connect\(dsn\)"):
        send_email.enqueue_sync(to="a@b.c")
    with pytest.raises(NotConnected, match="or set JOBQUEUE_DSN"):
        asyncio.run(send_email.enqueue(to="a@b.c"))


def test_connect_takes_a_database_or_a_client_not_both():
    app, _, _ = app_with_tasks()
    with pytest.raises(ValueError, match="not both"):
        app.connect("postgresql://x/y", client=AsyncClient("postgresql://x/y"))
    with pytest.raises(TypeError, match="takes an AsyncClient or a Client"):
        app.connect(client="postgresql://x/y")  # type: ignore[arg-type]
