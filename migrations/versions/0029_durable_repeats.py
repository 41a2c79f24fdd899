"""An idempotent repeat (an answer from a held key) waits for the synchronous standby like a first
write: insert_jobs writes one WAL record when it answers with a holder's id.

Revision ID: 0029_durable_repeats
Revises: 0028_event_listener_bounds
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0029_durable_repeats"
down_revision = "0028_event_listener_bounds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0029_durable_repeats.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0029_durable_repeats.down.sql")
