"""`MaintainRight`: whether the leader's role may VACUUM and REINDEX ``jobqueue.jobs``, asked once.

Before PostgreSQL 17 only the table's owner may; a worker running as ``jobqueue_worker`` (migration
0019) is not, so the `Vacuumer` and the `Reindexer` stand aside with one warning instead of failing
every run (REINDEX) or vacuuming nothing while believing it did (VACUUM only warns). Autovacuum
still vacuums the table; rebuilding bloated indexes then needs a leader running as the owner, or
PostgreSQL 17, where 0019 grants the worker role MAINTAIN (docs/security.md, "Roles").
"""

from __future__ import annotations

import logging

from jobqueue.db import gateway as db
from jobqueue.store import vacuum as vacuum_store

log = logging.getLogger("jobqueue.maintenance")


class MaintainRight:
    def __init__(self, service: str) -> None:
        self.service = service
        self.known: bool | None = None

    async def allowed(self, conn) -> bool:
        """The answer, from the database the first time (``conn``: any connection of the leader's role)."""
        if self.known is None:
            allowed: bool = await db.run(conn, vacuum_store.may_maintain())
            self.known = allowed
            if not self.known:
                log.warning(
                    "%s stands aside: this role may not VACUUM or REINDEX jobqueue.jobs (its owner may, "
                    "or from PostgreSQL 17 a role with MAINTAIN); autovacuum still runs",
                    self.service,
                )
        return self.known
