"""Event listener registrations bounded: a TTL of at most two minutes (more than 0), an id of 1 to
255 characters, at most 64 per login, each refreshed or removed only by the login that made it.

Revision ID: 0028_event_listener_bounds
Revises: 0027_claim_scope
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0028_event_listener_bounds"
down_revision = "0027_claim_scope"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0028_event_listener_bounds.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0028_event_listener_bounds.down.sql")
