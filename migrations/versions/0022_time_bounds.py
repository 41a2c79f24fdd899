"""A job's times within ten years: run_at at most 3650 days from now, expires_at at most 3650 days
after run_at, delay at most 3650 days (a run_at past year 9999 broke every listing that met it).

Revision ID: 0022_time_bounds
Revises: 0021_worker_job_types
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0022_time_bounds"
down_revision = "0021_worker_job_types"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0022_time_bounds.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0022_time_bounds.down.sql")
