"""Each app's declaration of a task: a neighbour app with a same-named task neither takes over its
attempts nor narrows the fields producers encrypt.

Revision ID: 0036_task_declarations
Revises: 0035_ordered_work
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0036_task_declarations"
down_revision = "0035_ordered_work"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0036_task_declarations.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0036_task_declarations.down.sql")
