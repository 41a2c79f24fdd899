"""The dashboard's per-minute throughput history, written by the maintenance leader.

Revision ID: 0014_throughput_history
Revises: 0013_key_allow_lists
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0014_throughput_history"
down_revision = "0013_key_allow_lists"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0014_throughput_history.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0014_throughput_history.down.sql")
