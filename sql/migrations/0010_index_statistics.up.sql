-- Exact index statistics for the reindexer (issue 10), where the server can give them.
--
-- The reindexer judges an index from pgstatindex() (the pgstattuple extension, in PostgreSQL's
-- contrib: on Debian part of the postgresql package): how full its leaf pages really are, so a
-- bulk load or a stale reltuples cannot make it rebuild a healthy index. The extension is not
-- trusted, so only a superuser can create it: where it is not available, or this role may not
-- create it, the migration says so in a NOTICE and goes on, and the reindexer falls back to an
-- estimate from pg_class and the table's statistics (see jobqueue/maintenance/reindexer.py). It is
-- created in the default schema, where a DBA would have put it; the reindexer finds it wherever
-- it is. Not in the jobqueue schema: the reference schema does not depend on the server.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgstattuple') THEN
        RAISE NOTICE 'jobqueue: the pgstattuple extension is not available on this server: the reindexer estimates index bloat';
        RETURN;
    END IF;
    CREATE EXTENSION IF NOT EXISTS pgstattuple;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'jobqueue: this role may not create the pgstattuple extension (a superuser can: CREATE EXTENSION pgstattuple): the reindexer estimates index bloat';
END
$$;
