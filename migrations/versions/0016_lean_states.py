"""Lean transitions: the columns a claim or an ack writes move to the end of the job's row, fillfactor 60
(the update's new version stays on its page and logs only the changed tail).

Revision ID: 0016_lean_states
Revises: 0015_encrypted_fields
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0016_lean_states"
down_revision = "0015_encrypted_fields"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0016_lean_states.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0016_lean_states.down.sql")
