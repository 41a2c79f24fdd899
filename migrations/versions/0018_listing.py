"""An index for listing jobs in the states a drained job never enters (failed, dead_letter,
cancelled), newest first: the dead-letter listing and ?state= filters on them read only their rows.

Revision ID: 0018_listing
Revises: 0017_input_limits
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0018_listing"
down_revision = "0017_input_limits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0018_listing.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0018_listing.down.sql")
