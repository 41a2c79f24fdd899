"""Payload encryption binds each value to its job: enqueue_many takes the id a sealing producer
made for the job (a version-7 UUID within the hour), and jobqueue.encryption_keys records the key
ids `jobqueue keys rotate` has held.

Revision ID: 0025_bound_envelopes
Revises: 0024_quotas
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0025_bound_envelopes"
down_revision = "0024_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0025_bound_envelopes.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0025_bound_envelopes.down.sql")
