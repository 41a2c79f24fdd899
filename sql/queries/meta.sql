-- Queries about the installation itself.

-- name: schema_revision
-- The Alembic revision the database is at (UndefinedTable when it was never migrated).
SELECT version_num FROM public.jobqueue_alembic_version;

-- name: meta_session_timeouts
-- The waits this session is allowed, in milliseconds (0: none). Behind a transaction pooler
-- jobqueue cannot set them itself and checks, once per pool, that the server's configuration does.
SELECT name, setting::bigint FROM pg_settings
WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout');

-- name: meta_server_started
-- When this server's postmaster started: it changes when PostgreSQL restarts, and when a failover
-- puts another server behind the same DSN.
SELECT pg_postmaster_start_time();
