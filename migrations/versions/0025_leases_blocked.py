"""The registry lists the jobs whose lease renewal another transaction's row lock held up, so that
the sweeper leaves them to their live worker (workers.leases_blocked).

Revision ID: 0025_leases_blocked
Revises: 0024_quotas
"""

from alembic import op

from jobqueue.sql import run_migration_script

revision = "0025_leases_blocked"
down_revision = "0024_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0025_leases_blocked.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0025_leases_blocked.down.sql")
