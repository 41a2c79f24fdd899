"""Per-key allow-lists of queues and job types for producer keys.

Revision ID: 0013_key_allow_lists
Revises: 0012_circuits
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0013_key_allow_lists"
down_revision = "0012_circuits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0013_key_allow_lists.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0013_key_allow_lists.down.sql")
