"""Global concurrency and rate limits per job type and per queue, enforced by the claim.

Revision ID: 0016_job_limits
Revises: 0015_encrypted_fields
"""

from alembic import op

from jobqueue.sql import run_migration_script

revision = "0016_job_limits"
down_revision = "0015_encrypted_fields"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0016_job_limits.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0016_job_limits.down.sql")
