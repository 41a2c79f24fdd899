"""Quotas hold on every path (issue 18): a payload at most 1 MiB as stored, enqueue_many at most
10,000 jobs, the maintenance leader's gates (a queue at its hard limit, all queues at the total,
too many undeclared queues) refusing SQL producers too, and the login timeouts `jobqueue roles
login` sets.

Revision ID: 0024_quotas
Revises: 0023_untrusted_input
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0024_quotas"
down_revision = "0023_untrusted_input"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0024_quotas.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0024_quotas.down.sql")
