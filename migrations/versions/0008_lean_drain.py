"""Time-ordered job ids instead of the listing index; result rows only where there is a result.

Revision ID: 0008_lean_drain
Revises: 0007_attempt_guarantees
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0008_lean_drain"
down_revision = "0007_attempt_guarantees"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0008_lean_drain.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0008_lean_drain.down.sql")
