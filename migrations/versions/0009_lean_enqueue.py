"""A leaner enqueue: an inlined uuid_v7(), no insert triggers, set-based validation in enqueue_many.

Revision ID: 0009_lean_enqueue
Revises: 0008_lean_drain
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0009_lean_enqueue"
down_revision = "0008_lean_drain"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0009_lean_enqueue.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0009_lean_enqueue.down.sql")
