"""Input limits on every enqueue path: name lengths, a past run_at means now, zone-less JSON times and unknown fields refused.

Revision ID: 0018_input_limits
Revises: 0015_encrypted_fields
"""

from alembic import op

from jobqueue.sql import run_migration_script

revision = "0018_input_limits"
down_revision = "0015_encrypted_fields"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0018_input_limits.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0018_input_limits.down.sql")
