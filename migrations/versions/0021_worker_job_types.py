"""The job types each worker serves, in the worker registry.

Revision ID: 0021_worker_job_types
Revises: 0020_job_limits
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0021_worker_job_types"
down_revision = "0020_job_limits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0021_worker_job_types.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0021_worker_job_types.down.sql")
