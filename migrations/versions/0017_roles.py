"""Least-privilege PostgreSQL roles (producer, worker, admin, api, readonly) with row-level
isolation of producers' jobs (docs/security.md, "Roles").

Revision ID: 0017_roles
Revises: 0015_encrypted_fields
"""

from alembic import op

from jobqueue.sql import run_migration_script

revision = "0017_roles"
down_revision = "0015_encrypted_fields"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0017_roles.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0017_roles.down.sql")
