"""A worker claims only the job types it serves: jobs_claim_type_idx lets its claims go by type past
other apps' jobs in front of its own (issue 17, §5).

Revision ID: 0027_claim_scope
Revises: 0026_leases_blocked
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0027_claim_scope"
down_revision = "0026_leases_blocked"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0027_claim_scope.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0027_claim_scope.down.sql")
