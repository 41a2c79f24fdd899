"""Idempotency keys held for a window after submission; per-job timeout and expiry at enqueue.

Revision ID: 0006_enqueue_guarantees
Revises: 0005_idempotency_per_producer
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0006_enqueue_guarantees"
down_revision = "0005_idempotency_per_producer"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0006_enqueue_guarantees.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0006_enqueue_guarantees.down.sql")
