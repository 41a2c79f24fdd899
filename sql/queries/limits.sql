-- Global concurrency and rate limits (jobqueue.job_limits), per job type or per queue. How a claim
-- uses them is in sql/migrations/0020_job_limits.up.sql (limit_allowances) and
-- jobqueue/worker/claimer.py (claim_limited). Time comparisons take an optional %(now)s.

-- name: limit_allowances
-- In the claim's transaction, before its claim statements: the limits that apply to a claim of
-- %(queues)s (every job-type limit, and those queues' own), each with how many jobs this transaction
-- may claim now (its row is locked until the commit) and, for a spent rate, in how many seconds
-- one start frees up.
SELECT limit_scope, limit_name, allowance, free_in
FROM jobqueue.limit_allowances(%(queues)s::text[], %(now)s::timestamptz);

-- name: limit_record_starts
-- The same transaction, after its claims: the starts of each rate-limited limit, at the claim
-- transaction's now() (each job's started_at), appended to its sliding log; starts older than
-- the period are dropped.
UPDATE jobqueue.job_limits AS l
SET recent_starts = ARRAY(SELECT s.ts FROM unnest(l.recent_starts) AS s(ts)
                          WHERE s.ts > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => l.period_seconds)
                          ORDER BY s.ts)
                    || array_fill(coalesce(%(now)s::timestamptz, now()), ARRAY[i.started])
FROM unnest(%(scopes)s::text[], %(names)s::text[], %(counts)s::integer[]) AS i(scope, name, started)
WHERE l.scope = i.scope AND l.name = i.name AND l.rate IS NOT NULL AND i.started > 0;

-- name: limit_any
-- Whether a worker claiming %(queues)s must claim through limit_allowances.
SELECT EXISTS (SELECT FROM jobqueue.job_limits l
               WHERE l.scope = 'job_type' OR (l.scope = 'queue' AND l.name = ANY(%(queues)s::text[])));

-- name: limit_sync
-- At worker start: the app's declared limits (set_by 'code'). A limit an operator set is kept;
-- %(undeclared_scopes)s/%(undeclared_names)s — the app's job types and the worker's queues that
-- declare none — lose a code limit they had (the code no longer asks for it).
WITH declared AS (
    INSERT INTO jobqueue.job_limits AS l (scope, name, concurrency, rate, period_seconds)
    SELECT * FROM unnest(%(scopes)s::text[], %(names)s::text[], %(concurrency)s::integer[],
                         %(rates)s::integer[], %(periods)s::float8[])
    ON CONFLICT (scope, name) DO UPDATE
    SET concurrency = excluded.concurrency, rate = excluded.rate, period_seconds = excluded.period_seconds,
        updated_at = now()
    WHERE l.set_by = 'code'
      AND (l.concurrency, l.rate, l.period_seconds)
          IS DISTINCT FROM (excluded.concurrency, excluded.rate, excluded.period_seconds)
    RETURNING l.name
), dropped AS (
    DELETE FROM jobqueue.job_limits l
    USING unnest(%(undeclared_scopes)s::text[], %(undeclared_names)s::text[]) AS u(scope, name)
    WHERE l.scope = u.scope AND l.name = u.name AND l.set_by = 'code'
    RETURNING l.name
)
SELECT (SELECT count(*) FROM declared) AS declared, (SELECT count(*) FROM dropped) AS dropped;

-- name: limit_set
-- An operator's limit (set_by 'admin': worker starts leave it alone until it is cleared). Jobs of
-- its scope already running are marked limited, so they count against it from now on.
WITH upserted AS (
    INSERT INTO jobqueue.job_limits AS l (scope, name, concurrency, rate, period_seconds, set_by)
    VALUES (%(scope)s, %(name)s, %(concurrency)s, %(rate)s, %(period)s, 'admin')
    ON CONFLICT (scope, name) DO UPDATE
    SET concurrency = excluded.concurrency, rate = excluded.rate, period_seconds = excluded.period_seconds,
        set_by = 'admin', updated_at = now()
    RETURNING l.scope, l.name
), marked AS (
    UPDATE jobqueue.jobs j SET limited = true
    WHERE j.state = 'processing' AND NOT j.limited AND j.locked_until IS NOT NULL
      AND CASE %(scope)s WHEN 'job_type' THEN j.job_type ELSE j.queue END = %(name)s
    RETURNING j.id
)
SELECT (SELECT count(*) FROM upserted) AS set, (SELECT count(*) FROM marked) AS marked;

-- name: limit_clear
-- Remove a limit, whoever set it (a code limit comes back at the next worker start that declares it).
DELETE FROM jobqueue.job_limits WHERE scope = %(scope)s AND name = %(name)s RETURNING name;

-- name: limit_list
-- Every limit with what it holds now: running (processing jobs claimed under it) and the starts of
-- its current window (`GET /limits`, the CLI, /metrics).
SELECT l.scope, l.name, l.concurrency, l.rate, l.period_seconds, l.set_by,
       (SELECT count(*)::integer FROM jobqueue.jobs j
        WHERE j.state = 'processing' AND j.limited
          AND CASE l.scope WHEN 'job_type' THEN j.job_type ELSE j.queue END = l.name) AS running,
       (SELECT count(*)::integer FROM unnest(l.recent_starts) AS s(ts)
        WHERE l.period_seconds IS NOT NULL
          AND s.ts > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => l.period_seconds)) AS window_starts,
       l.updated_at
FROM jobqueue.job_limits l
ORDER BY l.scope, l.name;
