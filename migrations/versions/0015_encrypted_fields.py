"""Each task's encrypted payload fields, published by workers for producers that do not import the app.

Revision ID: 0015_encrypted_fields
Revises: 0013_key_allow_lists
"""

from alembic import op

from jobqueue.sql import run_migration_script

revision = "0015_encrypted_fields"
down_revision = "0013_key_allow_lists"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0015_encrypted_fields.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0015_encrypted_fields.down.sql")
