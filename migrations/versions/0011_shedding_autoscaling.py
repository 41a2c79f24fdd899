"""Load shedding of low-priority retries (per queue, opt-in) and concurrency autoscaling figures.

Revision ID: 0011_shedding_autoscaling
Revises: 0010_index_statistics
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0011_shedding_autoscaling"
down_revision = "0010_index_statistics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0011_shedding_autoscaling.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0011_shedding_autoscaling.down.sql")
