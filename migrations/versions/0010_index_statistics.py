"""The pgstattuple extension where the server has it and the role may create it: exact index
statistics for the reindexer.

Revision ID: 0010_index_statistics
Revises: 0009_lean_enqueue
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0010_index_statistics"
down_revision = "0009_lean_enqueue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0010_index_statistics.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0010_index_statistics.down.sql")
