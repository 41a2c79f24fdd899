"""Warnings for a submission that names a queue or job type this database does not know — no
worker ever served it, no task declared it, no operator configured it (`KnownNames`): ``sned_email``
or ``mial`` was accepted without a word, and its jobs waited for a worker that would never come.

The jobs are accepted all the same (a producer may deploy before its workers): the answer carries
``warnings`` (one line per unknown name; absent when there are none), and the API logs each line
once per process (at most `MAX_LOGGED` distinct lines, so a producer inventing names cannot flood
the log). The known names are read at most every `TTL` seconds per process, reloaded ahead of
expiry (`jobqueue.runtime.refresh_ahead`): a name a worker starts serving stops warning within that
time. A database that cannot be read for them (an outage, a role without the grant) gives no
warnings rather than failing a submission that is already committed.
"""

from __future__ import annotations

import logging
from typing import Iterable

from jobqueue.api.store_access import ApiStore
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated, PermissionDenied
from jobqueue.model.queues import KnownNames
from jobqueue.runtime.refresh_ahead import RefreshAheadCache

log = logging.getLogger("jobqueue.api")

TTL = 5.0
MAX_LOGGED = 1000


class NameWarnings:
    def __init__(self, store: ApiStore, ttl: float | None = None) -> None:
        self._known: RefreshAheadCache[None, KnownNames] = RefreshAheadCache(
            lambda _key: store.known_names(), TTL if ttl is None else ttl, max_entries=1
        )
        self._logged: set[str] = set()

    async def of(self, jobs: Iterable[tuple[str, str]], producer_id: str) -> list[str]:
        """The warnings for these (queue, job type) pairs, logged once each."""
        try:
            known = await self._known.get(None)
        except (DatabaseUnavailable, NotMigrated, PermissionDenied) as exc:
            log.debug("known queue and job type names unread: %s", exc)
            return []
        found = known.warnings(jobs) if known is not None else []
        for line in found:
            if line not in self._logged and len(self._logged) < MAX_LOGGED:
                self._logged.add(line)
                log.warning("submission of producer %r: %s", producer_id, line)
        return found
