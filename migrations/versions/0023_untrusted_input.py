"""What producers send is checked before it is stored: a job's traceparent is a W3C trace context
(job_problem() refuses anything else on every enqueue path), and the REST API's listing cursors are
sealed with a key all its processes share (jobqueue.api_secrets).

Revision ID: 0023_untrusted_input
Revises: 0022_time_bounds
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0023_untrusted_input"
down_revision = "0022_time_bounds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0023_untrusted_input.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0023_untrusted_input.down.sql")
