"""A login's event listener registrations take one lock of that login, so two at once cannot both
count 63 and pass the bound of 64 together.

Revision ID: 0030_listener_cap_lock
Revises: 0029_durable_repeats
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0030_listener_cap_lock"
down_revision = "0029_durable_repeats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0030_listener_cap_lock.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0030_listener_cap_lock.down.sql")
