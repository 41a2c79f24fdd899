"""The registry lists the jobs whose lease renewal another transaction's row lock held up, so that
the sweeper leaves them to their live worker (workers.leases_blocked).

Revision ID: 0026_leases_blocked
Revises: 0025_bound_envelopes
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0026_leases_blocked"
down_revision = "0025_bound_envelopes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0026_leases_blocked.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0026_leases_blocked.down.sql")
