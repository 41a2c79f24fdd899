"""API keys get a name and an expiry; every queue and job type a worker ever served is recorded, so
a misspelled one on enqueue or pause is flagged instead of silently accepted.

Revision ID: 0031_operator_guards
Revises: 0030_listener_cap_lock
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0031_operator_guards"
down_revision = "0030_listener_cap_lock"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0031_operator_guards.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0031_operator_guards.down.sql")
