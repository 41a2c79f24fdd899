"""Least-privilege PostgreSQL roles (producer, worker, admin, api, readonly) with row-level
isolation of producers' jobs (docs/security.md, "Roles").

Revision ID: 0019_roles
Revises: 0018_listing
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0019_roles"
down_revision = "0018_listing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0019_roles.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0019_roles.down.sql")
