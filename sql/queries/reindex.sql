-- The reindexer (jobqueue.maintenance.reindexer): rebuilds the live-state partial indexes of
-- jobqueue.jobs when churn has bloated them. Every job enters and leaves these indexes, and a
-- btree never gives emptied pages back to the file: River saw such an index reach 4 GB where a
-- rebuild needed 35 MB. REINDEX CONCURRENTLY blocks neither claims nor inserts; a rebuild that
-- failed half-way leaves an invalid <index>_ccnew (or _ccold) behind, dropped before the next
-- (one statement each: DROP INDEX CONCURRENTLY takes one index).

-- name: reindex_bloated
-- The live-state indexes whose file is at least %(factor)s times what their entries need (at a
-- generous 64 bytes per entry, from the index's own tuple count, which autovacuum keeps current)
-- and at least %(min_pages)s pages: only an index with that much dead space is worth a rebuild.
SELECT c.relname
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'jobqueue'
  AND c.relname IN ('jobs_claim_idx', 'jobs_lease_idx', 'jobs_expiry_idx', 'jobs_retry_wait_idx')
  AND pg_relation_size(c.oid) / current_setting('block_size')::bigint >= %(min_pages)s
  AND pg_relation_size(c.oid) >= %(factor)s * greatest(c.reltuples, 0) * 64
ORDER BY c.relname;

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
