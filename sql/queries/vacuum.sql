-- The vacuumer (jobqueue.maintenance.vacuumer) and what it shares with the reindexer: whether the
-- job table is due a VACUUM, the VACUUM itself, and whether an old transaction would make either
-- of them work for nothing (VACUUM cannot remove what it still sees) or wait (REINDEX and DROP
-- INDEX CONCURRENTLY wait for every older transaction, holding a lock that keeps VACUUM away).

-- name: vacuum_held_back
-- The oldest transaction of this database (or prepared transaction) open for more than
-- %(max_age)s seconds that holds a snapshot or a transaction id: (pid, seconds open), nothing when
-- there is none. VACUUM's and REINDEX CONCURRENTLY's own backends are not counted: they are
-- excluded from each other's horizons and waits. Other databases do not hold back this one's
-- horizon for an ordinary table, nor make a concurrent rebuild wait.
SELECT pid, seconds
FROM (
    SELECT a.pid, extract(epoch FROM now() - a.xact_start)::float8 AS seconds
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.pid <> pg_backend_pid()
      AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
      AND a.backend_type = 'client backend'
      AND NOT (a.state = 'active' AND (a.query ILIKE 'vacuum%%' OR a.query ILIKE 'reindex%%'))
    UNION ALL
    SELECT NULL, extract(epoch FROM now() - p.prepared)::float8
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
) AS open_transactions
WHERE seconds > %(max_age)s
ORDER BY seconds DESC
LIMIT 1;

-- name: vacuum_jobs_due
-- The dead row versions of jobqueue.jobs when it is due a VACUUM that autovacuum has not done: at
-- least %(min_dead)s and at least %(dead_fraction)s of its live rows, and no vacuum running on it.
SELECT s.n_dead_tup
FROM pg_stat_user_tables s
WHERE s.relid = 'jobqueue.jobs'::regclass
  AND s.n_dead_tup >= greatest(%(min_dead)s, %(dead_fraction)s * s.n_live_tup)
  AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_vacuum p WHERE p.relid = s.relid);

-- name: vacuum_jobs
-- SKIP_LOCKED: a VACUUM already running (autovacuum) or a concurrent rebuild holds the table's
-- lock; this pass is then skipped rather than queued behind it. ANALYZE too: the reindexer's
-- estimate trusts the statistics only while few rows changed since they were taken.
VACUUM (SKIP_LOCKED, ANALYZE) jobqueue.jobs;

-- name: vacuum_may_maintain
-- Whether this role may VACUUM and REINDEX jobqueue.jobs: a superuser, its owner (or a member of
-- the owner), or from PostgreSQL 17 on a holder of MAINTAIN, which 0019 grants jobqueue_worker.
-- The CASE keeps PostgreSQL 15 and 16, which know no MAINTAIN, from evaluating the privilege name.
SELECT pg_has_role(current_user, c.relowner, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::integer >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
FROM pg_class c
WHERE c.oid = 'jobqueue.jobs'::regclass;
