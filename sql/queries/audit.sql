-- The audit log (jobqueue.audit_log, migration 0032; jobqueue.store.audit): what the clients set
-- before an action for an API key, the listings, the chain's verification and its retention.
-- Entries are written by the actions' own statements (jobqueue.audit()), never from here.

-- name: audit_set_actor
-- The API key (and HTTP client) the REST API acts for, for this transaction only: jobqueue.audit()
-- names it instead of the API's login. Believed only from a login holding jobqueue_api (or the
-- owner); any other session that sets it is recorded as itself.
SELECT set_config('jobqueue.actor', %(claim)s, true);

-- name: audit_list
-- Newest first, with bounded work per page (as job_list): walks audit_log_seq_key backwards from
-- %(before)s (the cursor: the last seq the previous page examined; NULL: from the newest) and
-- examines at most %(scan)s entries, returning those matching the filters, at most %(limit)s; when
-- the budget runs out first, the last entry examined comes too (matches false) as the next cursor.
-- %(action)s matches an action (queue.pause) or its area (queue); %(since)s: written at or after.
SELECT e.seq, e.at, e.actor, e.action, e.target, e.details, e.api_key_id, e.client_addr, e.db_role,
       e.application_name, e.producer_id, encode(e.hash, 'hex'), e.matches, e.examined
FROM (
    SELECT w.*, row_number() OVER (ORDER BY w.seq DESC) AS examined,
           ((%(actor)s::text IS NULL OR w.actor = %(actor)s::text)
            AND (%(action)s::text IS NULL OR w.action = %(action)s::text OR split_part(w.action, '.', 1) = %(action)s::text)
            AND (%(target)s::text IS NULL OR w.target = %(target)s::text)
            AND (%(since)s::timestamptz IS NULL OR w.at >= %(since)s::timestamptz)) AS matches
    FROM (SELECT a.* FROM jobqueue.audit_log a
          WHERE a.seq < coalesce(%(before)s::bigint, 9223372036854775807)
          ORDER BY a.seq DESC
          LIMIT %(scan)s) AS w
) AS e
WHERE e.matches OR e.examined = %(scan)s
ORDER BY e.seq DESC
LIMIT %(limit)s;

-- name: audit_list_of_producer
-- audit_list of one producer's own entries (a producer key's view): the walk is of
-- audit_log_producer_idx, so the entries examined are only that producer's.
SELECT e.seq, e.at, e.actor, e.action, e.target, e.details, e.api_key_id, e.client_addr, e.db_role,
       e.application_name, e.producer_id, encode(e.hash, 'hex'), e.matches, e.examined
FROM (
    SELECT w.*, row_number() OVER (ORDER BY w.seq DESC) AS examined,
           ((%(actor)s::text IS NULL OR w.actor = %(actor)s::text)
            AND (%(action)s::text IS NULL OR w.action = %(action)s::text OR split_part(w.action, '.', 1) = %(action)s::text)
            AND (%(target)s::text IS NULL OR w.target = %(target)s::text)
            AND (%(since)s::timestamptz IS NULL OR w.at >= %(since)s::timestamptz)) AS matches
    FROM (SELECT a.* FROM jobqueue.audit_log a
          WHERE a.producer_id = %(producer_id)s::text AND a.seq < coalesce(%(before)s::bigint, 9223372036854775807)
          ORDER BY a.seq DESC
          LIMIT %(scan)s) AS w
) AS e
WHERE e.matches OR e.examined = %(scan)s
ORDER BY e.seq DESC
LIMIT %(limit)s;

-- name: audit_snapshot
-- The verification reads the head and every stretch of the chain in one snapshot, so entries
-- committed or pruned meanwhile neither break nor pass it.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: audit_head
-- The chain's head and anchor, and the entries outside the chain (no seq, or past the head: only
-- written with the chain's trigger off): how many, and the first one's id.
SELECT c.last_seq, c.last_hash, c.pruned_seq, c.pruned_hash,
       (SELECT count(*) FROM jobqueue.audit_log a WHERE a.seq IS NULL OR a.seq > c.last_seq),
       (SELECT min(a.id) FROM jobqueue.audit_log a WHERE a.seq IS NULL OR a.seq > c.last_seq)
FROM jobqueue.audit_chain c;

-- name: audit_verify_stretch
-- The next %(limit)s entries of the chain after seq %(after_seq)s (whose hash is %(after_hash)s),
-- up to the head's seq %(upto)s: each one's hash recomputed from its fields and the hash before it.
-- The first break: an entry missing (a gap in seq: the first seq missing), an entry edited (its
-- hash is not its fields'), or an entry whose hash was rewritten with it (the entry after it
-- chained to another hash: the rewritten one is named). Returns the stretch's size, last seq and
-- last hash, and the break (seq, problem) or NULLs.
WITH stretch AS (
    SELECT a.seq, a.hash, a.prev_hash, a.hash IS DISTINCT FROM jobqueue.audit_hash(a) AS edited
    FROM jobqueue.audit_log a
    WHERE a.seq > %(after_seq)s::bigint AND a.seq <= %(upto)s::bigint
    ORDER BY a.seq
    LIMIT %(limit)s
), linked AS (
    SELECT s.*, coalesce(lag(s.seq) OVER w, %(after_seq)s::bigint) AS before_seq,
           coalesce(lag(s.hash) OVER w, %(after_hash)s::bytea) AS before_hash
    FROM stretch s
    WINDOW w AS (ORDER BY s.seq)
), judged AS (
    SELECT l.seq, l.hash,
           CASE WHEN l.seq <> l.before_seq + 1 THEN l.before_seq + 1
                WHEN l.edited THEN l.seq
                WHEN l.prev_hash IS DISTINCT FROM l.before_hash THEN l.before_seq END AS broken_at,
           CASE WHEN l.seq <> l.before_seq + 1 THEN 'missing'
                WHEN l.edited THEN 'edited'
                WHEN l.prev_hash IS DISTINCT FROM l.before_hash THEN 'rewritten' END AS problem
    FROM linked l
)
SELECT (SELECT count(*) FROM judged), (SELECT max(j.seq) FROM judged j),
       (SELECT j.hash FROM judged j ORDER BY j.seq DESC LIMIT 1), b.broken_at, b.problem
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT j.broken_at, j.problem FROM judged j WHERE j.broken_at IS NOT NULL ORDER BY j.broken_at LIMIT 1
) AS b ON true;

-- name: audit_prune
-- Retention, one batch: the oldest entries written more than %(keep)s ago (by the database's
-- clock), at most %(limit)s, as the log's owner (jobqueue.prune_audit_log() removes a prefix of
-- the chain, moves its anchor and records that it did).
SELECT jobqueue.prune_audit_log(%(keep)s::interval, %(limit)s::integer);
