"""The client room: what producers and operators call — `AsyncClient`, and `Client`, its blocking twin.

- `validation`: `NewJob`, the checks of a job to enqueue, and the enqueue_many statement;
  `sealing`: its payload fields encrypted; `admin`: the checks of every other request;
- `async_client`, `sync_client`: the two clients, the same methods (a test keeps them so);
- `waiting`: `wait()`; `coalesce`: group commit of concurrent `submit` calls (the REST API's);
  `schedules`: ``client.schedules``, cron schedules.
"""

from jobqueue.client.async_client import AsyncClient
from jobqueue.client.sync_client import Client
from jobqueue.client.validation import ValidatedJob

__all__ = ["AsyncClient", "Client", "ValidatedJob"]
