"""REST API keys as stored (the secret itself never is)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key as stored: who it acts as and with which role. The secret itself is never kept."""

    id: uuid.UUID
    producer_id: str
    role: str
    key_prefix: str
    created_at: datetime
    revoked_at: datetime | None
    queues: list[str] | None = None  # the queues it may submit to (None: any)
    job_types: list[str] | None = None  # the job types it may submit (None: any)
    name: str | None = None  # what it is for, as its creator named it
    expires_at: datetime | None = None  # refused from then on (None: never expires)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def refuses(self, queue: str, job_type: str) -> str | None:
        """The field its allow-lists refuse for a job (``queue`` or ``job_type``), or None."""
        if self.queues is not None and queue not in self.queues:
            return "queue"
        if self.job_types is not None and job_type not in self.job_types:
            return "job_type"
        return None
