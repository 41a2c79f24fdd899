"""Input limits on every enqueue path: name lengths, a past run_at means now, zone-less JSON times and unknown fields
refused.

Revision ID: 0017_input_limits
Revises: 0016_lean_states
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0017_input_limits"
down_revision = "0016_lean_states"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0017_input_limits.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0017_input_limits.down.sql")
