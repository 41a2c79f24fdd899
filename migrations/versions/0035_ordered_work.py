"""Ordered work and progress (issue 21): jobs.ordering_key with the waiting state, the per-key lock,
the triggers that release a key's next job, the ordering_key parameter of every enqueue path, the
ordering_keys view; jobs.progress.

Revision ID: 0035_ordered_work
Revises: 0032_audit_log
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0035_ordered_work"
down_revision = "0032_audit_log"  # at merge: the newest revision before it (0031 and 0033 are other branches')
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0035_ordered_work.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0035_ordered_work.down.sql")
