"""Observability (worker stats rows).

Revision ID: 0004_observability
Revises: 0003_api
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0004_observability"
down_revision = "0003_api"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0004_observability.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0004_observability.down.sql")
