"""Idempotency keys are unique per producer while the job is live.

Revision ID: 0005_idempotency_per_producer
Revises: 0004_observability
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0005_idempotency_per_producer"
down_revision = "0004_observability"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0005_idempotency_per_producer.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0005_idempotency_per_producer.down.sql")
