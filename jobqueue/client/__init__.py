"""The client room (being split: this commit only moves client.py here, as async_client.py)."""

from jobqueue.client.async_client import *  # noqa: F403 (until the split that follows)
