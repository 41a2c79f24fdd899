"""Each task's encrypted payload fields, published by workers for producers that do not import the app.

Revision ID: 0015_encrypted_fields
Revises: 0014_throughput_history
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0015_encrypted_fields"
down_revision = "0014_throughput_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0015_encrypted_fields.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0015_encrypted_fields.down.sql")
