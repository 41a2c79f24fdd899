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
-- At worker start: app %(app)s's declared limits (set_by 'code', declared_by the app). A limit an
-- operator set is kept. A code limit is written when it is new, when this app declared it, or when
-- the app that did has no live worker (running or stopping, a heartbeat within three of its
-- intervals: this app takes it over); one a live other app declared differently is left as that
-- app declared it, and returned (the worker logs it). %(undeclared_scopes)s/%(undeclared_names)s
-- — the app's job types and the worker's queues that it declares no limit for — lose the code
-- limit this app had declared for them (the code no longer asks for it); another app's limit on a
-- same-named task stays (one stored before 0027, declared_by '', stays until an app declares it
-- again or an operator clears it).
WITH live_apps AS (
    SELECT DISTINCT w.app FROM jobqueue.workers w
    WHERE w.app IS NOT NULL AND w.app <> %(app)s AND w.status IN ('running', 'stopping')
      AND w.last_heartbeat >= now() - make_interval(secs => 3 * w.heartbeat_interval)
), wanted AS (
    SELECT * FROM unnest(%(scopes)s::text[], %(names)s::text[], %(concurrency)s::integer[],
                         %(rates)s::integer[], %(periods)s::float8[]) AS d(scope, name, concurrency, rate, period_seconds)
), declared AS (
    INSERT INTO jobqueue.job_limits AS l (scope, name, concurrency, rate, period_seconds, declared_by)
    SELECT d.scope, d.name, d.concurrency, d.rate, d.period_seconds, %(app)s FROM wanted d
    ON CONFLICT (scope, name) DO UPDATE
    SET concurrency = excluded.concurrency, rate = excluded.rate, period_seconds = excluded.period_seconds,
        declared_by = excluded.declared_by, updated_at = now()
    WHERE l.set_by = 'code'
      AND (l.declared_by = excluded.declared_by OR l.declared_by NOT IN (SELECT app FROM live_apps))
      AND (l.concurrency, l.rate, l.period_seconds, l.declared_by)
          IS DISTINCT FROM (excluded.concurrency, excluded.rate, excluded.period_seconds, excluded.declared_by)
    RETURNING l.name
), overruled AS (
    SELECT l.scope, l.name, l.declared_by FROM jobqueue.job_limits l JOIN wanted d USING (scope, name)
    WHERE l.set_by = 'code' AND l.declared_by IN (SELECT app FROM live_apps)
      AND (l.concurrency, l.rate, l.period_seconds) IS DISTINCT FROM (d.concurrency, d.rate, d.period_seconds)
), dropped AS (
    DELETE FROM jobqueue.job_limits l
    USING unnest(%(undeclared_scopes)s::text[], %(undeclared_names)s::text[]) AS u(scope, name)
    WHERE l.scope = u.scope AND l.name = u.name AND l.set_by = 'code' AND l.declared_by = %(app)s
    RETURNING l.name
)
-- (Every data-modifying CTE above runs to completion whether this reads it or not.)
SELECT 'limit' AS what, o.scope || ' ' || o.name, o.declared_by FROM overruled o ORDER BY o.scope, o.name;

-- name: limit_set
-- An operator's limit (set_by 'admin': worker starts leave it alone until it is cleared). Jobs of
-- its scope already running are marked limited, so they count against it from now on. A part
-- whose %(keep_concurrency)s / %(keep_rate)s is true stays as the stored limit (the code's or an
-- operator's) has it: setting a concurrency keeps the rate. Nothing is written (set 0) when the
-- result would limit nothing (the only part there was removed: that is a clear). Setting and
-- clearing a limit are recorded in the audit log (limit.set, limit.clear; target scope:name), a
-- set with the limit it leaves (the kept part too).
WITH stored AS (
    SELECT l.concurrency, l.rate, l.period_seconds FROM jobqueue.job_limits l
    WHERE l.scope = %(scope)s AND l.name = %(name)s
    FOR UPDATE
), wanted AS (
    SELECT CASE WHEN %(keep_concurrency)s THEN (SELECT concurrency FROM stored) ELSE %(concurrency)s::integer END
               AS concurrency,
           CASE WHEN %(keep_rate)s THEN (SELECT rate FROM stored) ELSE %(rate)s::integer END AS rate,
           CASE WHEN %(keep_rate)s THEN (SELECT period_seconds FROM stored) ELSE %(period)s::float8 END AS period
), upserted AS (
    INSERT INTO jobqueue.job_limits AS l (scope, name, concurrency, rate, period_seconds, set_by)
    SELECT %(scope)s, %(name)s, w.concurrency, w.rate, w.period, 'admin' FROM wanted w
    WHERE w.concurrency IS NOT NULL OR w.rate IS NOT NULL
    ON CONFLICT (scope, name) DO UPDATE
    SET concurrency = excluded.concurrency, rate = excluded.rate, period_seconds = excluded.period_seconds,
        set_by = 'admin', updated_at = now()
    RETURNING l.scope, l.name, l.concurrency, l.rate, l.period_seconds
), marked AS (
    UPDATE jobqueue.jobs j SET limited = true
    WHERE j.state = 'processing' AND NOT j.limited AND j.locked_until IS NOT NULL
      AND CASE %(scope)s WHEN 'job_type' THEN j.job_type ELSE j.queue END = %(name)s
      AND EXISTS (SELECT FROM upserted)
    RETURNING j.id
), recorded AS (
    SELECT jobqueue.audit('limit.set', u.scope || ':' || u.name, jsonb_build_object(
               'concurrency', u.concurrency, 'rate', u.rate, 'period_seconds', u.period_seconds)) AS entry
    FROM upserted u
)
SELECT (SELECT count(*) FROM upserted) AS set, (SELECT count(*) FROM marked) AS marked,
       (SELECT count(*) FROM recorded) AS recorded;

-- name: limit_clear
-- Remove a limit, whoever set it (a code limit comes back at the next worker start that declares it).
WITH gone AS (
    DELETE FROM jobqueue.job_limits WHERE scope = %(scope)s AND name = %(name)s
    RETURNING scope, name, set_by, concurrency, rate, period_seconds
)
SELECT g.name
FROM gone g CROSS JOIN LATERAL jobqueue.audit('limit.clear', g.scope || ':' || g.name, jsonb_build_object(
    'set_by', g.set_by, 'concurrency', g.concurrency, 'rate', g.rate, 'period_seconds', g.period_seconds)) AS recorded;

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
       l.updated_at, l.declared_by
FROM jobqueue.job_limits l
ORDER BY l.scope, l.name;
