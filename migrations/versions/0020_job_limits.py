"""Global concurrency and rate limits per job type and per queue, enforced by the claim.

Revision ID: 0020_job_limits
Revises: 0019_roles
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0020_job_limits"
down_revision = "0019_roles"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0020_job_limits.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0020_job_limits.down.sql")
