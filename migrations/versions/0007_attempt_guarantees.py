"""A deadline on every attempt, a reason on every dead letter, stuck handlers in the registry.

Revision ID: 0007_attempt_guarantees
Revises: 0006_enqueue_guarantees
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0007_attempt_guarantees"
down_revision = "0006_enqueue_guarantees"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0007_attempt_guarantees.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0007_attempt_guarantees.down.sql")
