-- Queries about the installation itself.

-- name: schema_revision
-- The Alembic revision the database is at (UndefinedTable when it was never migrated).
SELECT version_num FROM public.jobqueue_alembic_version;
