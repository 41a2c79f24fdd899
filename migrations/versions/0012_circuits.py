"""Circuit breakers shared by every worker: jobqueue.circuits and the job types behind each one.

Revision ID: 0012_circuits
Revises: 0011_shedding_autoscaling
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0012_circuits"
down_revision = "0011_shedding_autoscaling"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0012_circuits.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0012_circuits.down.sql")
