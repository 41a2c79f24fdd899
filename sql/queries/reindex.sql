-- The reindexer (jobqueue.maintenance.reindexer): rebuilds an index of jobqueue.jobs that churn
-- and pruning have left mostly empty. A btree never gives emptied pages back to the file: after a
-- backlog is drained and pruned, every index of the table keeps the size it had at its peak
-- (River saw one reach 4 GB where a rebuild needed 35 MB). REINDEX CONCURRENTLY blocks neither
-- claims nor inserts; a rebuild that failed half-way leaves an invalid <index>_ccnew (or _ccold)
-- behind, dropped before anything else (one statement each: DROP INDEX CONCURRENTLY takes one
-- index). Index names are never spliced into SQL: each covered index has its own statements, and
-- %(indexes)s is the list jobqueue.store.reindex keeps of them.

-- name: reindex_leftovers
-- What failed rebuilds of the covered indexes left behind, by name.
SELECT c.relname
FROM pg_class c
JOIN pg_index i ON i.indexrelid = c.oid
WHERE i.indrelid = 'jobqueue.jobs'::regclass
  AND c.relname IN (SELECT name || suffix FROM unnest(%(indexes)s::text[]) AS name,
                                               unnest(ARRAY['_ccnew', '_ccold']) AS suffix)
ORDER BY c.relname;

-- name: reindex_use_pgstattuple
-- Where the pgstattuple extension is installed (in whatever schema) and this role may call its
-- pgstatindex(regclass), put that schema on this transaction's search_path so that
-- reindex_bloated_exact finds the function; no row when it cannot be used.
SELECT set_config('search_path', quote_ident(n.nspname) || ', pg_catalog', true)
FROM pg_extension e
JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pgstattuple'
  AND to_regprocedure(quote_ident(n.nspname) || '.pgstatindex(regclass)') IS NOT NULL
  AND has_function_privilege(to_regprocedure(quote_ident(n.nspname) || '.pgstatindex(regclass)'), 'EXECUTE');

-- name: reindex_bloated_exact
-- The covered indexes worth a rebuild, most wasted space first: (name, pages in the file, pages
-- a rebuild would need). pgstatindex() reads the index (through a small ring of buffers) and
-- tells how full its leaf pages really are; a rebuild packs the same entries at the default leaf
-- fillfactor (90) and needs about 2 %% more for the upper levels, plus the metapage and root.
-- Worth it: at least %(min_waste_mb)s MB to win, and the file %(factor)s times what it needs.
-- Only indexes that big are read at all.
WITH candidates AS MATERIALIZED (
    SELECT c.oid, c.relname, pg_relation_size(c.oid) / current_setting('block_size')::float8 AS file_pages
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'jobqueue.jobs'::regclass
      AND i.indisvalid
      AND c.relname = ANY(%(indexes)s::text[])
      AND pg_relation_size(c.oid) >= %(min_waste_mb)s * 1048576
), measured AS (
    SELECT c.relname, c.file_pages,
           2 + ceil(CASE WHEN s.leaf_pages > 0 THEN s.leaf_pages * s.avg_leaf_density / 90.0 * 1.02 ELSE 0 END)
               AS needed_pages
    FROM candidates c, LATERAL pgstatindex(c.oid::regclass) s
)
SELECT relname, file_pages::bigint, needed_pages::bigint
FROM measured
WHERE (file_pages - needed_pages) * current_setting('block_size')::float8 >= %(min_waste_mb)s * 1048576
  AND file_pages >= %(factor)s * needed_pages
ORDER BY file_pages - needed_pages DESC, relname;

-- name: reindex_bloated_estimate
-- The same judgement without pgstattuple, from statistics: an upper bound of the entries (what
-- the last VACUUM or ANALYZE counted, pg_class.reltuples, plus every row inserted, updated or
-- deleted since, which inserts do not otherwise show there) times the entry width (the key
-- columns' average widths from pg_stats plus tuple header and line pointer; 64 bytes when
-- statistics are missing), at the leaf fillfactor. The counters of a busy backend reach
-- pg_stat_user_tables up to a minute late, so nothing is judged while the table's file has grown
-- past what the last VACUUM/ANALYZE saw (a bulk load in progress or just done): an index is
-- judged once the table's statistics are fresh (after the VACUUM ANALYZE the vacuumer runs).
-- An index never counted (reltuples -1) is not judged.
WITH fresh AS (
    SELECT s.n_mod_since_analyze + s.n_ins_since_vacuum AS changed
    FROM pg_stat_user_tables s
    JOIN pg_class t ON t.oid = s.relid
    WHERE s.relid = 'jobqueue.jobs'::regclass
      AND t.relpages >= 0
      AND pg_relation_size(t.oid) / current_setting('block_size')::float8 <= 1.1 * t.relpages + 8
), measured AS (
    SELECT c.relname, pg_relation_size(c.oid) / current_setting('block_size')::float8 AS file_pages,
           2 + ceil((c.reltuples + fresh.changed) * width.entry_bytes
                    / ((current_setting('block_size')::float8 - 40) * 0.9)) AS needed_pages
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    CROSS JOIN fresh
    CROSS JOIN LATERAL (
        SELECT CASE WHEN count(s.avg_width) = count(*) THEN 16 + sum(s.avg_width) ELSE 64 END AS entry_bytes
        FROM unnest(i.indkey::int2[]) AS k(attnum)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        LEFT JOIN pg_stats s ON s.schemaname = 'jobqueue' AND s.tablename = 'jobs' AND s.attname = a.attname
    ) AS width
    WHERE i.indrelid = 'jobqueue.jobs'::regclass
      AND i.indisvalid
      AND c.relname = ANY(%(indexes)s::text[])
      AND c.reltuples >= 0
)
SELECT relname, file_pages::bigint, needed_pages::bigint
FROM measured
WHERE (file_pages - needed_pages) * current_setting('block_size')::float8 >= %(min_waste_mb)s * 1048576
  AND file_pages >= %(factor)s * needed_pages
ORDER BY file_pages - needed_pages DESC, relname;

-- name: reindex_drop_jobs_pkey_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_pkey_ccnew;

-- name: reindex_drop_jobs_pkey_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_pkey_ccold;

-- name: reindex_jobs_pkey
REINDEX INDEX CONCURRENTLY jobqueue.jobs_pkey;

-- name: reindex_drop_jobs_claim_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_claim_idx_ccnew;

-- name: reindex_drop_jobs_claim_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_claim_idx_ccold;

-- name: reindex_jobs_claim_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_claim_idx;

-- name: reindex_drop_jobs_lease_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_lease_idx_ccnew;

-- name: reindex_drop_jobs_lease_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_lease_idx_ccold;

-- name: reindex_jobs_lease_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_lease_idx;

-- name: reindex_drop_jobs_finished_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_finished_idx_ccnew;

-- name: reindex_drop_jobs_finished_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_finished_idx_ccold;

-- name: reindex_jobs_finished_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_finished_idx;

-- name: reindex_drop_jobs_expiry_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_expiry_idx_ccnew;

-- name: reindex_drop_jobs_expiry_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_expiry_idx_ccold;

-- name: reindex_jobs_expiry_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_expiry_idx;

-- name: reindex_drop_jobs_retry_wait_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_retry_wait_idx_ccnew;

-- name: reindex_drop_jobs_retry_wait_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_retry_wait_idx_ccold;

-- name: reindex_jobs_retry_wait_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_retry_wait_idx;

-- name: reindex_drop_jobs_dead_letter_idx_ccnew
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_dead_letter_idx_ccnew;

-- name: reindex_drop_jobs_dead_letter_idx_ccold
DROP INDEX CONCURRENTLY IF EXISTS jobqueue.jobs_dead_letter_idx_ccold;

-- name: reindex_jobs_dead_letter_idx
REINDEX INDEX CONCURRENTLY jobqueue.jobs_dead_letter_idx;
