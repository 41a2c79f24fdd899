"""The audit log: every operator's and producer's action (cancel, dead-letter retry and purge,
deletes, queue settings, API keys, breakers, limits, schedules, key rotations, role changes) in an
append-only, hash-chained ``jobqueue.audit_log``, written in the transaction of the action itself
(docs/security.md, "Audit log").

Revision ID: 0032_audit_log
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0032_audit_log"
down_revision = "0034_scheduled_for"  # at merge: the newest revision before it (0031 and 0033 are other branches')
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0032_audit_log.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0032_audit_log.down.sql")
