-- Runtime queries on jobqueue.jobs (and the result/error rows written with its transitions).
-- Every time comparison takes an optional %(now)s so tests can control the clock.

-- name: job_enqueue
SELECT jobqueue.enqueue(
    job_type => %(job_type)s, payload => %(payload)s::jsonb, priority => %(priority)s,
    run_at => %(run_at)s::timestamptz, queue => %(queue)s, max_attempts => %(max_attempts)s::integer,
    idempotency_key => %(idempotency_key)s, delay => %(delay)s::interval,
    producer_id => %(producer_id)s, traceparent => %(traceparent)s, timeout => %(timeout)s::interval,
    expires_at => %(expires_at)s::timestamptz, expire_after => %(expire_after)s::interval,
    idempotency_window => %(idempotency_window)s::interval,
    idempotency_mismatch => %(idempotency_mismatch)s::text, ordering_key => %(ordering_key)s::text) AS id;

-- name: job_enqueue_many
SELECT id, created FROM jobqueue.enqueue_many(%(jobs)s::jsonb);

-- name: job_enqueue_many_waiting_briefly
-- enqueue_many for a group-committed statement that carries several callers' jobs: a wait for a
-- lock (another transaction's uncommitted holder of one caller's idempotency key) is cut after
-- %(lock_timeout)s (a setting local to this statement's transaction), so the others are not held
-- up: the group fails as busy, and each caller's jobs go again on their own, with the usual wait.
-- The LATERAL reference makes the setting come first.
SELECT e.id, e.created
FROM (SELECT set_config('lock_timeout', %(lock_timeout)s, true)) AS cfg(value)
CROSS JOIN LATERAL jobqueue.enqueue_many(CASE WHEN cfg.value IS NOT NULL THEN %(jobs)s::jsonb END) AS e;

-- name: job_claim
-- Up to %(limit)s runnable jobs of the given queues, in priority then submission order.
-- Its parameters, by the claim mode that sets them (jobqueue.worker.claimer; store.jobs.claim):
--   every claim      worker_id, queues, limit, lease_seconds, timeouts, default_timeout,
--                    deadline_grace (store.jobs.Deadlines), served, blocked, now (tests' clock)
--   resuming         after_run_at, after_seq: one queue, strict priorities, while claims fill up
--                    (empty arrays: scan from the start: several queues, limited claims, probes)
--   circuit probe    only: the half-open circuit's job types (Breakers.probe, in its transaction)
--   limited claims   limits_checked true (false: a worker that knows of no limit), mark_limited,
--                    only (one limited type's own claim), until_level, until_run_at, until_seq
--                    (how far the claim of the other types reached; 3/NULL/NULL: no bound)
-- Weighted priorities claim with job_claim_weighted, then fill up with job_claim.
-- One probe of jobs_claim_idx per (level, queue) with the level fixed, so priority = level AND
-- run_at <= now() bounds each scan on both sides. (One ordered scan over all levels could not
-- stop at now() inside a level: it read every future job of each higher level before reaching a
-- lower one — 100,000 "high" jobs scheduled for next week cost each claim ~670 pages.)
-- Levels run in order: the LATERAL makes this a nested loop over generate_series, whose rows
-- come in order, and the outer LIMIT stops it, so a lower level is probed only when the higher
-- ones could not fill the claim (no ORDER BY is needed, and FOR UPDATE rules out parallel plans).
-- One queue (the usual case): the probe feeds the LIMIT directly and locks only the rows it hands
-- on. Several queues: each level's per-queue probes are merged by (run_at, seq), which takes them
-- whole, so up to %(limit)s rows per queue may be locked without being claimed; the statement's
-- end releases them. A one-time filter on cardinality(queues) runs only one of the two branches.
-- A job past its expires_at is never started: the sweeper dead-letters it (reason expired).
-- Resuming: with a backlog, the entries in front of a level's first runnable job belong to jobs
-- already claimed — dead index entries until vacuum, never removed while a snapshot is held — and
-- a scan from the start walks them all (a 1M-job drain fell from 25k to 14k claims/s, to 2.6k
-- under a held snapshot). %(after_run_at)s[level + 1] / %(after_seq)s[level + 1], the order key
-- of the last job this worker claimed at that level, start the one-queue probe just past it: one
-- index descent, whatever lies behind. The worker resumes only while its claims fill up and does
-- a full scan at least every second, so jobs put back behind the mark (a reclaimed lease, a late
-- commit with an old run_at) wait at most that long; NULL marks scan from the start.
-- Served types: %(served)s, the job types the worker has handlers for (NULL: any), are the only
-- ones it claims; %(blocked)s, the job types of open circuits (an empty array when none), and
-- types outside %(only)s (NULL: any type; a half-open probe's or a limited type's own claim) are
-- skipped too. What the worker may take is k.types (served, not blocked, within only). Each
-- (queue, level) probe first reads its head, the first runnable entry (one index descent, no
-- lock): when the head is of a type the worker may take, the ordered probe above runs, testing the
-- type on each entry it hands on (jobs of other types interleaved with its own cost what they are
-- interleaved; docs/workers.md, "Circuit breakers", has the figures); when it is not — a run of
-- another app's jobs, a type nobody serves, an open circuit's backlog at the front — the probe
-- goes by type instead: one probe of jobs_claim_type_idx (queue, job_type, priority, run_at, seq)
-- per type in k.types, merged by (run_at, seq), so what lies in front costs nothing, however long
-- it is. That path locks up to %(limit)s rows per type with runnable jobs at the level (the
-- merge takes them whole), released at the statement's end.
-- Limits (jobqueue.job_limits): %(limits_checked)s false (a worker that knows of no limit) claims
-- nothing at all once a limit applies to these queues (any job-type limit, or one of theirs, as
-- limit_any says) — a one-time filter on the small table, so a worker that
-- has not heard of a new limit yet cannot overspend it; it re-reads them and claims through
-- limit_allowances first (%(limits_checked)s true). %(mark_limited)s sets jobs.limited on the
-- jobs it claims: they hold a slot of their limit while processing. The claim of a limited job type
-- with room (%(only)s that type) looks no further than the claim of the other types just before it
-- in the same transaction reached: levels below %(until_level)s whole, that level up to
-- (%(until_run_at)s, %(until_seq)s), none after it (defaults: 3 and NULL, no bound) — an index
-- bound (b.until_*), so a limited type costs a probe of its own jobs up to that point.
WITH kinds AS (
    SELECT ARRAY(SELECT s.t FROM unnest(%(served)s::text[]) AS s(t)
                 WHERE s.t <> ALL(%(blocked)s::text[])
                   AND (%(only)s::text[] IS NULL OR s.t = ANY(%(only)s::text[]))) AS types
), next AS (
    SELECT c.id
    FROM kinds k
    CROSS JOIN generate_series(0, 3) AS p(level)
    CROSS JOIN LATERAL (
        SELECT coalesce((%(after_run_at)s::timestamptz[])[p.level + 1], '-infinity') AS after_run_at,
               coalesce((%(after_seq)s::bigint[])[p.level + 1], 0) AS after_seq,
               CASE WHEN p.level < %(until_level)s THEN 'infinity'::timestamptz
                    WHEN p.level = %(until_level)s THEN coalesce(%(until_run_at)s::timestamptz, 'infinity')
                    ELSE '-infinity' END AS until_run_at,
               CASE WHEN p.level = %(until_level)s AND %(until_run_at)s::timestamptz IS NOT NULL
                    THEN %(until_seq)s::bigint ELSE 9223372036854775807 END AS until_seq
    ) AS b
    CROSS JOIN LATERAL (
        SELECT %(served)s::text[] IS NOT NULL AND coalesce((
            SELECT j.job_type <> ALL(k.types)
            FROM jobqueue.jobs j
            WHERE cardinality(%(queues)s::text[]) = 1
              AND j.state IN ('pending', 'failed')
              AND j.queue = (%(queues)s::text[])[1]
              AND j.priority = p.level
              AND j.run_at <= coalesce(%(now)s::timestamptz, now())
              AND (j.run_at, j.seq) > (b.after_run_at, b.after_seq)
              AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
            ORDER BY j.run_at, j.seq
            LIMIT 1), false) AS by_type
        OFFSET 0  -- read once per level, not once per branch that tests it
    ) AS h
    CROSS JOIN LATERAL (
        SELECT one.id FROM (
            SELECT j.id
            FROM jobqueue.jobs j
            WHERE cardinality(%(queues)s::text[]) = 1 AND NOT h.by_type
              AND j.state IN ('pending', 'failed')
              AND j.queue = (%(queues)s::text[])[1]
              AND j.priority = p.level
              AND j.run_at <= coalesce(%(now)s::timestamptz, now())
              AND j.job_type <> ALL(%(blocked)s::text[])
              AND (%(only)s::text[] IS NULL OR (j.job_type = ANY(%(only)s::text[])) IS TRUE)
              AND (%(served)s::text[] IS NULL OR (j.job_type = ANY(%(served)s::text[])) IS TRUE)
              AND (j.run_at, j.seq) > (b.after_run_at, b.after_seq)
              AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
              AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
            ORDER BY j.run_at, j.seq
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS one
        UNION ALL
        SELECT typed.id FROM (
            SELECT c.id
            FROM unnest(CASE WHEN cardinality(%(queues)s::text[]) = 1 AND h.by_type THEN k.types END) AS t(job_type)
            CROSS JOIN LATERAL (
                SELECT j.id, j.run_at, j.seq
                FROM jobqueue.jobs j
                WHERE j.state IN ('pending', 'failed')
                  AND j.queue = (%(queues)s::text[])[1]
                  AND j.job_type = t.job_type
                  AND j.priority = p.level
                  AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                  AND (j.run_at, j.seq) > (b.after_run_at, b.after_seq)
                  AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
                  AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
                ORDER BY j.run_at, j.seq
                LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED
            ) AS c
            ORDER BY c.run_at, c.seq
            LIMIT %(limit)s
        ) AS typed
        UNION ALL
        SELECT merged.id FROM (
            SELECT c.id
            FROM unnest(%(queues)s::text[]) AS q(name)
            CROSS JOIN LATERAL (
                SELECT %(served)s::text[] IS NOT NULL AND coalesce((
                    SELECT j.job_type <> ALL(k.types)
                    FROM jobqueue.jobs j
                    WHERE j.state IN ('pending', 'failed')
                      AND j.queue = q.name
                      AND j.priority = p.level
                      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                      AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
                    ORDER BY j.run_at, j.seq
                    LIMIT 1), false) AS by_type
                OFFSET 0
            ) AS hq
            CROSS JOIN LATERAL (
                SELECT o.id, o.run_at, o.seq FROM (
                    SELECT j.id, j.run_at, j.seq
                    FROM jobqueue.jobs j
                    WHERE NOT hq.by_type
                      AND j.state IN ('pending', 'failed')
                      AND j.queue = q.name
                      AND j.priority = p.level
                      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                      AND j.job_type <> ALL(%(blocked)s::text[])
                      AND (%(only)s::text[] IS NULL OR (j.job_type = ANY(%(only)s::text[])) IS TRUE)
                      AND (%(served)s::text[] IS NULL OR (j.job_type = ANY(%(served)s::text[])) IS TRUE)
                      AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
                      AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
                    ORDER BY j.run_at, j.seq
                    LIMIT %(limit)s
                    FOR UPDATE SKIP LOCKED
                ) AS o
                UNION ALL
                SELECT typed.id, typed.run_at, typed.seq
                FROM unnest(CASE WHEN hq.by_type THEN k.types END) AS t(job_type)
                CROSS JOIN LATERAL (
                    SELECT j.id, j.run_at, j.seq
                    FROM jobqueue.jobs j
                    WHERE j.state IN ('pending', 'failed')
                      AND j.queue = q.name
                      AND j.job_type = t.job_type
                      AND j.priority = p.level
                      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                      AND (j.run_at, j.seq) <= (b.until_run_at, b.until_seq)
                      AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
                    ORDER BY j.run_at, j.seq
                    LIMIT %(limit)s
                    FOR UPDATE SKIP LOCKED
                ) AS typed
            ) AS c
            WHERE cardinality(%(queues)s::text[]) > 1
            ORDER BY c.run_at, c.seq
            LIMIT %(limit)s
        ) AS merged
    ) AS c
    WHERE %(limits_checked)s
       OR NOT EXISTS (SELECT FROM jobqueue.job_limits l
                      WHERE l.scope = 'job_type' OR (l.scope = 'queue' AND l.name = ANY(%(queues)s::text[])))
    LIMIT %(limit)s
), claimed AS (
    -- The attempt's deadline: the job's own timeout (given at enqueue), else its type's as this
    -- worker knows it (%(timeouts)s, a JSON object of seconds by job type), else the worker's
    -- processing TTL. The lease never runs past the deadline by more than %(deadline_grace)s
    -- seconds, however often the heartbeat extends it.
    UPDATE jobqueue.jobs AS j
    SET state = 'processing',
        attempts = j.attempts + 1,
        locked_by = %(worker_id)s,
        deadline_at = coalesce(%(now)s::timestamptz, now()) + coalesce(j.timeout, make_interval(secs => (%(timeouts)s::jsonb ->> j.job_type)::float8), make_interval(secs => %(default_timeout)s)),
        locked_until = coalesce(%(now)s::timestamptz, now()) + least(
            make_interval(secs => %(lease_seconds)s),
            coalesce(j.timeout, make_interval(secs => (%(timeouts)s::jsonb ->> j.job_type)::float8), make_interval(secs => %(default_timeout)s)) + make_interval(secs => %(deadline_grace)s)),
        started_at = now(),
        updated_at = now(),
        limited = j.limited OR %(mark_limited)s
    WHERE j.id = ANY(ARRAY(SELECT id FROM next))
    RETURNING j.id, j.queue, j.job_type, j.payload, j.priority, j.attempts, j.max_attempts,
              j.traceparent, j.cancel_requested, j.created_at, j.run_at, j.seq, j.deadline_at, j.producer_id,
              j.scheduled_for
)
SELECT id, queue, job_type, payload, priority, attempts, max_attempts, traceparent, cancel_requested, created_at,
       extract(epoch FROM deadline_at - coalesce(%(now)s::timestamptz, now()))::float8 AS timeout, run_at, seq,
       producer_id, scheduled_for
FROM claimed
ORDER BY priority, run_at, seq;

-- name: job_claim_weighted
-- Weighted priorities: %(quotas)s[i] slots for (queue %(queues)s[i], level %(priorities)s[i]).
-- The caller draws the quotas by weight, so every level with work keeps a share. %(served)s and
-- %(blocked)s: as in job_claim, the job types the worker serves and those of open circuits, with
-- the same head check: by type (jobs_claim_type_idx) when the slot's first runnable job is not one
-- it may take. A worker that knows of limits claims through job_claim; this one claims nothing
-- once a limit exists (as job_claim does when limits are not checked).
WITH kinds AS (
    SELECT ARRAY(SELECT s.t FROM unnest(%(served)s::text[]) AS s(t) WHERE s.t <> ALL(%(blocked)s::text[])) AS types
), next AS (
    SELECT c.id
    FROM kinds k
    CROSS JOIN unnest(%(queues)s::text[], %(priorities)s::smallint[], %(quotas)s::integer[]) AS s(queue, priority, quota)
    CROSS JOIN LATERAL (
        SELECT %(served)s::text[] IS NOT NULL AND coalesce((
            SELECT j.job_type <> ALL(k.types)
            FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed')
              AND j.queue = s.queue
              AND j.priority = s.priority
              AND j.run_at <= coalesce(%(now)s::timestamptz, now())
            ORDER BY j.run_at, j.seq
            LIMIT 1), false) AS by_type
        OFFSET 0  -- read once per level, not once per branch that tests it
    ) AS h
    CROSS JOIN LATERAL (
        SELECT o.id FROM (
            SELECT j.id
            FROM jobqueue.jobs j
            WHERE NOT h.by_type
              AND j.state IN ('pending', 'failed')
              AND j.queue = s.queue
              AND j.priority = s.priority
              AND j.run_at <= coalesce(%(now)s::timestamptz, now())
              AND j.job_type <> ALL(%(blocked)s::text[])
              AND (%(served)s::text[] IS NULL OR (j.job_type = ANY(%(served)s::text[])) IS TRUE)
              AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
            ORDER BY j.run_at, j.seq
            LIMIT s.quota
            FOR UPDATE SKIP LOCKED
        ) AS o
        UNION ALL
        SELECT typed.id FROM (
            SELECT c.id
            FROM unnest(CASE WHEN h.by_type THEN k.types END) AS t(job_type)
            CROSS JOIN LATERAL (
                SELECT j.id, j.run_at, j.seq
                FROM jobqueue.jobs j
                WHERE j.state IN ('pending', 'failed')
                  AND j.queue = s.queue
                  AND j.job_type = t.job_type
                  AND j.priority = s.priority
                  AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                  AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
                ORDER BY j.run_at, j.seq
                LIMIT s.quota
                FOR UPDATE SKIP LOCKED
            ) AS c
            ORDER BY c.run_at, c.seq
            LIMIT s.quota
        ) AS typed
    ) AS c
    WHERE NOT EXISTS (SELECT FROM jobqueue.job_limits l
                      WHERE l.scope = 'job_type' OR (l.scope = 'queue' AND l.name = ANY(%(queues)s::text[])))
), claimed AS (
    -- The attempt's deadline: the job's own timeout (given at enqueue), else its type's as this
    -- worker knows it (%(timeouts)s, a JSON object of seconds by job type), else the worker's
    -- processing TTL. The lease never runs past the deadline by more than %(deadline_grace)s
    -- seconds, however often the heartbeat extends it.
    UPDATE jobqueue.jobs AS j
    SET state = 'processing',
        attempts = j.attempts + 1,
        locked_by = %(worker_id)s,
        deadline_at = coalesce(%(now)s::timestamptz, now()) + coalesce(j.timeout, make_interval(secs => (%(timeouts)s::jsonb ->> j.job_type)::float8), make_interval(secs => %(default_timeout)s)),
        locked_until = coalesce(%(now)s::timestamptz, now()) + least(
            make_interval(secs => %(lease_seconds)s),
            coalesce(j.timeout, make_interval(secs => (%(timeouts)s::jsonb ->> j.job_type)::float8), make_interval(secs => %(default_timeout)s)) + make_interval(secs => %(deadline_grace)s)),
        started_at = now(),
        updated_at = now()
    WHERE j.id = ANY(ARRAY(SELECT id FROM next))
    RETURNING j.id, j.queue, j.job_type, j.payload, j.priority, j.attempts, j.max_attempts,
              j.traceparent, j.cancel_requested, j.created_at, j.run_at, j.seq, j.deadline_at, j.producer_id,
              j.scheduled_for
)
SELECT id, queue, job_type, payload, priority, attempts, max_attempts, traceparent, cancel_requested, created_at,
       extract(epoch FROM deadline_at - coalesce(%(now)s::timestamptz, now()))::float8 AS timeout, run_at, seq,
       producer_id, scheduled_for
FROM claimed
ORDER BY priority, run_at, seq;

-- name: job_complete_many
-- Batched ack. Guarded by attempt: the attempt that finishes the job is the one this worker holds
-- (processing, same attempt, locked by it), or — when its lease ran out and the sweeper put the job
-- back — an attempt whose job is still waiting and that no newer attempt has replaced (pending,
-- same attempt, nobody holding it): a late success is then accepted instead of running the job
-- again. Once another worker has started a newer attempt, or the job was finished otherwise (dead-
-- lettered, cancelled), the late success is refused and writes nothing, result included.
-- Rows another transaction holds locked (an operator's SELECT … FOR UPDATE, a cancel inside a
-- caller's open transaction) are passed over, not waited for: `mine` locks what it can (SKIP
-- LOCKED, with the lock the UPDATE takes anyway, so a foreign key check's KEY SHARE is no
-- obstacle) and the jobs it skipped that this ack could still finish come back with busy true, to
-- be tried again (before, one such row held the whole batch until the lock timeout, and the batch
-- was retried for as long as the lock lasted). The second read of the batch's rows, for the busy
-- ones, runs only when `mine` locked fewer rows than the batch has (a one-time filter).
-- The per-job arrays of ids, attempts and durations travel in binary (%%(name)b): psycopg sends a
-- UUID as its 16 bytes instead of formatting, scanning and quoting its text — measured per element
-- in psycopg 3.3: uuid 8.0 -> 0.8 us, integer 2.2 -> 0.5 us, double 2.5 -> 0.8 us.
WITH input AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(attempts)b::integer[], %(results)s::text[],
                         %(durations)b::double precision[]) AS t(id, attempt, result, duration_ms)
), mine AS (
    SELECT j.id
    FROM input i JOIN jobqueue.jobs j ON j.id = i.id
    -- id = ANY makes the jobs side primary-key probes whatever the statistics say (a plan joining
    -- the batch against every processing row once took 180 ms per ack at 20k rows); the join
    -- with the batch is then 200 rows against 200 (array_position per row did the same, slower).
    WHERE j.id = ANY(%(ids)b::uuid[])
      AND j.attempts = i.attempt
      AND ((j.state = 'processing' AND j.locked_by = %(worker_id)s)
           OR (j.state = 'pending' AND j.locked_by IS NULL))
    FOR NO KEY UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE jobqueue.jobs AS j
    SET state = 'completed', finished_at = now(), updated_at = now(), locked_by = %(worker_id)s,
        locked_until = NULL, deadline_at = NULL, duration_ms = i.duration_ms
    FROM input i
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine)) AND j.id = i.id
    RETURNING j.id
), stored AS (
    -- The result belongs to the attempt that finished the job: written only for jobs this
    -- statement completed, and only when the handler returned something (put-if-absent by job id;
    -- the duration is on the job's row).
    INSERT INTO jobqueue.job_results (job_id, outcome, result, duration_ms, worker_id)
    SELECT i.id, 'completed', i.result::jsonb, i.duration_ms, %(worker_id)s FROM input i
    WHERE i.result IS NOT NULL AND i.id IN (SELECT id FROM done)
    ON CONFLICT (job_id) DO NOTHING
)
SELECT id, false AS busy FROM done
UNION ALL
SELECT j.id, true
FROM input i JOIN jobqueue.jobs j ON j.id = i.id
WHERE (SELECT count(*) FROM mine) < cardinality(%(ids)b::uuid[])
  AND j.id = ANY(%(ids)b::uuid[]) AND j.id NOT IN (SELECT id FROM mine)
  AND j.attempts = i.attempt
  AND ((j.state = 'processing' AND j.locked_by = %(worker_id)s)
       OR (j.state = 'pending' AND j.locked_by IS NULL));

-- name: job_ack_lock_wait
-- The lock wait of the rest of this transaction (%(lock_timeout)s, e.g. '200ms'): the halves of an
-- ack batch that failed as busy are written with a short one (jobqueue.worker.acks).
SELECT set_config('lock_timeout', %(lock_timeout)s, true);

-- name: job_fail_many
-- Batched failure. actions[i] is 'retry', 'dead' (a permanent error) or 'cancel' (the handler
-- honoured a cancel request). The database has the last word, read from the row as it is when
-- the update locks it: a job whose cancel was requested ends cancelled whatever the failure (no
-- new attempt of it ever starts); a retry with no attempts left is dead-lettered; retry_in is the
-- backoff the worker drew for this job. Guarded like the completion: only the attempt this worker
-- holds can fail its job.
-- Load shedding: in a queue with queue_settings.shed_low_retries, a retry of a low job (priority
-- 3) is dead-lettered with reason 'shed' instead while the queue is above its soft limit: its
-- runnable depth (pending or failed, run_at due; backpressure counts scheduled jobs too) is greater than
-- least(soft limit, hard limit), each NULL limit falling back to %(default_soft_limit)s /
-- %(default_hard_limit)s (JOBQUEUE_API_SOFT_LIMIT / _HARD_LIMIT, as the API's). The depth is
-- counted only when the batch has such a retry (a one-time filter skips it when no queue sheds),
-- once per queue, reading at most limit + 1 entries of jobs_claim_idx (jobqueue.runnable_depth). The attempt's error is
-- recorded as for any failure, and worker_stats.shed counts the job.
-- A row another transaction holds locked is passed over and answered busy, as in
-- job_complete_many (`mine`).
WITH input AS (
    SELECT t.*
    FROM unnest(%(ids)s::uuid[], %(attempts)s::integer[], %(actions)s::text[],
                %(retry_in)s::double precision[], %(error_types)s::text[], %(messages)s::text[],
                %(tracebacks)s::text[])
        AS t(id, attempt, action, retry_in, error_type, message, traceback)
), mine AS (
    SELECT j.id
    FROM input i JOIN jobqueue.jobs j ON j.id = i.id
    WHERE j.id = ANY(ARRAY(SELECT id FROM input))
      AND j.state = 'processing' AND j.attempts = i.attempt AND j.locked_by = %(worker_id)s
    FOR NO KEY UPDATE OF j SKIP LOCKED
), low_retries AS (
    SELECT i.id, j.queue
    FROM input i
    JOIN jobqueue.jobs j ON j.id = i.id
    JOIN jobqueue.queue_settings s ON s.queue = j.queue AND s.shed_low_retries
    WHERE EXISTS (SELECT 1 FROM jobqueue.queue_settings WHERE shed_low_retries)
      AND i.action = 'retry' AND j.priority = 3
), over_soft_limit AS (
    SELECT l.queue
    FROM (SELECT DISTINCT queue FROM low_retries) AS l
    JOIN jobqueue.queue_settings s ON s.queue = l.queue
    CROSS JOIN LATERAL (SELECT least(coalesce(s.soft_limit, %(default_soft_limit)s::integer),
                                     coalesce(s.hard_limit, %(default_hard_limit)s::integer)) AS soft) AS lim
    WHERE jobqueue.runnable_depth(l.queue, lim.soft + 1) > lim.soft
), decided AS (
    SELECT i.id, i.attempt, i.retry_in,
           CASE WHEN i.id IN (SELECT l.id FROM low_retries l JOIN over_soft_limit o ON o.queue = l.queue)
                THEN 'shed' ELSE i.action END AS action
    FROM input i
), failed AS (
    -- cancel_requested is read in SET, from the row version this update locked: a cancel that
    -- committed after this statement began is still honoured. Out of attempts wins over shed.
    UPDATE jobqueue.jobs AS j
    SET state = CASE WHEN i.action = 'cancel' OR j.cancel_requested THEN 'cancelled'
                     WHEN i.action IN ('dead', 'shed') OR j.attempts >= j.max_attempts THEN 'dead_letter'
                     ELSE 'failed' END,
        dead_reason = CASE WHEN i.action = 'cancel' OR j.cancel_requested THEN NULL
                           WHEN i.action = 'dead' THEN 'permanent_error'
                           WHEN j.attempts >= j.max_attempts THEN 'attempts_exhausted'
                           WHEN i.action = 'shed' THEN 'shed' END,
        run_at = CASE WHEN i.action = 'retry' AND NOT j.cancel_requested AND j.attempts < j.max_attempts
                      THEN now() + make_interval(secs => i.retry_in) ELSE j.run_at END,
        finished_at = CASE WHEN i.action = 'retry' AND NOT j.cancel_requested AND j.attempts < j.max_attempts
                           THEN NULL ELSE now() END,
        locked_by = CASE WHEN i.action = 'retry' AND NOT j.cancel_requested AND j.attempts < j.max_attempts
                         THEN NULL ELSE j.locked_by END,  -- a finished job keeps who finished it
        locked_until = NULL, deadline_at = NULL, updated_at = now()
    FROM decided i
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine)) AND j.id = i.id
    RETURNING j.id, j.state, j.run_at, j.queue, j.job_type, j.dead_reason
), errors AS (
    INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message, traceback, worker_id)
    SELECT i.id, i.attempt, i.error_type, i.message, i.traceback, %(worker_id)s
    FROM input i JOIN failed f ON f.id = i.id
    ON CONFLICT (job_id, attempt) DO NOTHING
), finals AS (
    INSERT INTO jobqueue.job_results (job_id, outcome, error, worker_id)
    SELECT i.id, 'dead_letter', jsonb_build_object('type', i.error_type, 'message', i.message), %(worker_id)s
    FROM input i JOIN failed f ON f.id = i.id
    WHERE f.state = 'dead_letter'
    ON CONFLICT (job_id) DO NOTHING
), shed_counted AS (
    INSERT INTO jobqueue.worker_stats AS s (worker_id, queue, job_type, shed, updated_at)
    SELECT %(worker_id)s, f.queue, f.job_type, count(*), now()
    FROM failed f WHERE f.dead_reason = 'shed'
    GROUP BY f.queue, f.job_type
    ON CONFLICT (worker_id, queue, job_type) DO UPDATE SET shed = s.shed + EXCLUDED.shed, updated_at = EXCLUDED.updated_at
)
SELECT id, state, run_at, false AS busy FROM failed
UNION ALL
SELECT j.id, j.state, j.run_at, true
FROM input i JOIN jobqueue.jobs j ON j.id = i.id
WHERE (SELECT count(*) FROM mine) < cardinality(%(ids)s::uuid[])
  AND j.id = ANY(ARRAY(SELECT id FROM input)) AND j.id NOT IN (SELECT id FROM mine)
  AND j.state = 'processing' AND j.attempts = i.attempt AND j.locked_by = %(worker_id)s;

-- name: job_release_many
-- Jobs this worker holds but will not finish go back to the queue at once, the interrupted attempt
-- not counted, and idle workers are woken: at graceful shutdown, after a claim whose reply was
-- lost (rows it committed but the worker never saw), and when a handler raised CircuitOpen. A job
-- whose cancel was requested ends cancelled instead: no new attempt of it ever starts. Pairs (id,
-- attempt) name the attempts. A row another transaction holds locked is passed over (`mine`, as in
-- job_complete_many) and its id is in busy: the caller may try again; a job it never releases
-- comes back when its lease runs out.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::integer[]) AS r(id, attempt)
), mine AS (
    SELECT j.id
    FROM input r JOIN jobqueue.jobs j ON j.id = r.id
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.attempts = r.attempt
      AND j.state = 'processing' AND j.locked_by = %(worker_id)s
    FOR NO KEY UPDATE OF j SKIP LOCKED
), released AS (
    UPDATE jobqueue.jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'pending' END,
        finished_at = CASE WHEN j.cancel_requested THEN now() END,
        attempts = greatest(j.attempts - 1, 0), locked_by = NULL, locked_until = NULL, deadline_at = NULL,
        started_at = NULL, updated_at = now()
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine))
    RETURNING j.id, j.queue, j.state
), woken AS (
    SELECT pg_notify('jobqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM released WHERE state = 'pending') AS q
), busy AS (
    SELECT j.id
    FROM input r JOIN jobqueue.jobs j ON j.id = r.id
    WHERE (SELECT count(*) FROM mine) < cardinality(%(ids)s::uuid[])
      AND j.id = ANY(%(ids)s::uuid[]) AND j.id NOT IN (SELECT id FROM mine) AND j.attempts = r.attempt
      AND j.state = 'processing' AND j.locked_by = %(worker_id)s
)
SELECT (SELECT count(*) FROM released) AS released, (SELECT count(*) FROM woken) AS notified,
       (SELECT array_agg(id) FROM released) AS ids, (SELECT array_agg(id) FROM busy) AS busy;

-- name: job_held_by
-- The attempts %(worker_id)s holds according to the database: after a claim whose outcome is
-- unknown (its reply was lost), the worker compares them with the ones it knows about.
SELECT j.id, j.attempts FROM jobqueue.jobs j
WHERE j.locked_by = %(worker_id)s AND j.state = 'processing' AND j.locked_until IS NOT NULL;

-- name: job_extend_leases
-- Heartbeat for running attempts (id, attempt): extends the leases of the ones this worker still
-- holds and returns them with their cancel flag (busy false). A lease is never extended past the
-- attempt's deadline plus %(deadline_grace)s. A row another transaction holds locked (an operator's
-- SELECT … FOR UPDATE, a cancel inside a caller's open transaction) is passed over, not waited for
-- (before, one such row held the renewal of every lease its worker had until the lock timeout,
-- and the sweeper took the others): `mine` locks what it can, SKIP LOCKED, with the lock the UPDATE
-- takes anyway. The ones it passed over that the worker still holds come back with busy true: not
-- lost, just not renewed this time. The worker lists them in its registry row (worker_heartbeat's
-- leases_blocked), where the sweeper sees them, and tries again at its next beat.
WITH held AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::integer[]) AS h(id, attempt)
), mine AS (
    SELECT j.id
    FROM held h JOIN jobqueue.jobs j ON j.id = h.id
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.attempts = h.attempt
      AND j.state = 'processing' AND j.locked_by = %(worker_id)s
    FOR NO KEY UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE jobqueue.jobs AS j
    SET locked_until = least(coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease_seconds)s),
                             j.deadline_at + make_interval(secs => %(deadline_grace)s))
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine))
    RETURNING j.id, j.attempts, j.cancel_requested
)
SELECT id, attempts, cancel_requested, false AS busy FROM renewed
UNION ALL
SELECT j.id, j.attempts, false, true
FROM held h JOIN jobqueue.jobs j ON j.id = h.id
WHERE (SELECT count(*) FROM mine) < cardinality(%(ids)s::uuid[])
  AND j.id = ANY(%(ids)s::uuid[]) AND j.id NOT IN (SELECT id FROM mine) AND j.attempts = h.attempt
  AND j.state = 'processing' AND j.locked_by = %(worker_id)s;

-- name: job_reclaim_expired
-- The sweeper: processing jobs whose lease ran out go back to pending (or to dead_letter when out
-- of attempts, or to cancelled when their cancel was requested); the lost attempt is recorded as
-- an error — a JobTimeout when the lease ran to the attempt's deadline (the worker kept it alive
-- but never reported), else LeaseExpired (the worker stopped heartbeating) — and idle workers are
-- woken.
-- A row someone holds locked is skipped (SKIP LOCKED) while the lock lasts. When it is released,
-- its lease may have run out long ago only because that lock kept its worker from renewing it:
-- such a lease is left alone while its worker is alive — it beat its registry row within a lease
-- (three of its heartbeat intervals, by this server's clock; a worker that stopped holds nothing)
-- — and lists the job in leases_blocked (what its last renewal passed over as locked); the
-- worker's next renewal extends it. No worker can renew while the server is down, so a lease of
-- a worker that has not stopped counts from the server's start at the earliest: right after a
-- restart it is left alone for one lease (three of its worker's heartbeat intervals), time for
-- the worker to reconnect and renew it, or give back a claim whose reply the restart cut off.
-- (The sweeper holds off after an outage it saw itself too; this rule holds whichever process
-- leads after the restart, one whose sweeper never ran before included.) Everything else
-- expired is reclaimed as before, a live worker's forgotten attempts included.
WITH expired AS (
    SELECT j.id, j.locked_by, j.locked_until >= j.deadline_at AS overran FROM jobqueue.jobs j
    WHERE j.state = 'processing' AND j.locked_until < coalesce(%(now)s::timestamptz, now())
      AND NOT EXISTS (SELECT FROM jobqueue.workers w
                      WHERE w.id = j.locked_by AND w.status <> 'stopped'
                        AND (j.id = ANY(w.leases_blocked)
                             AND w.last_heartbeat > coalesce(%(now)s::timestamptz, now())
                                                    - make_interval(secs => 3 * w.heartbeat_interval)
                             OR pg_postmaster_start_time() > coalesce(%(now)s::timestamptz, now())
                                                              - make_interval(secs => 3 * w.heartbeat_interval)))
    ORDER BY j.locked_until
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), reclaimed AS (
    UPDATE jobqueue.jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN j.attempts >= j.max_attempts THEN 'dead_letter' ELSE 'pending' END,
        dead_reason = CASE WHEN NOT j.cancel_requested AND j.attempts >= j.max_attempts THEN 'attempts_exhausted' END,
        finished_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts THEN now() END,
        locked_by = NULL, locked_until = NULL, deadline_at = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.queue, j.state, j.attempts, e.locked_by AS lost_by, coalesce(e.overran, false) AS overran
), lost AS (
    SELECT r.*, CASE WHEN r.overran THEN 'JobTimeout' ELSE 'LeaseExpired' END AS error_type,
           CASE WHEN r.overran THEN format('attempt ran past its deadline; worker %%s did not report it', r.lost_by)
                ELSE format('lease expired: worker %%s stopped heartbeating', r.lost_by) END AS message
    FROM reclaimed r
), errors AS (
    INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message, worker_id)
    SELECT l.id, l.attempts, l.error_type, l.message, l.lost_by
    FROM lost l
    ON CONFLICT (job_id, attempt) DO NOTHING
), finals AS (
    INSERT INTO jobqueue.job_results (job_id, outcome, error, worker_id)
    SELECT l.id, 'dead_letter', jsonb_build_object('type', l.error_type, 'message', l.message), l.lost_by
    FROM lost l WHERE l.state = 'dead_letter'
    ON CONFLICT (job_id) DO NOTHING
), woken AS (
    SELECT pg_notify('jobqueue_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM reclaimed WHERE state = 'pending') AS q
)
SELECT r.id, r.state, r.lost_by, (SELECT count(*) FROM woken) AS notified FROM reclaimed r;

-- name: job_expire_waiting
-- The sweeper: jobs still waiting (pending, or failed and waiting for their retry) past their
-- expires_at go to dead_letter with reason expired — never silently deleted; an operator can
-- retry them (which clears the expiry). Found through jobs_expiry_idx, %(limit)s per statement.
WITH expired AS (
    SELECT j.id FROM jobqueue.jobs j
    WHERE j.expires_at < coalesce(%(now)s::timestamptz, now()) AND j.expires_at IS NOT NULL
      AND j.state IN ('pending', 'failed')
    ORDER BY j.expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), dead AS (
    UPDATE jobqueue.jobs AS j
    SET state = 'dead_letter', dead_reason = 'expired', finished_at = now(), updated_at = now()
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.expires_at
), finals AS (
    INSERT INTO jobqueue.job_results (job_id, outcome, error)
    SELECT d.id, 'dead_letter', jsonb_build_object('type', 'Expired', 'message',
               format('not started before it expired at %%s', d.expires_at))
    FROM dead d
    ON CONFLICT (job_id) DO NOTHING
)
SELECT d.id FROM dead d;

-- name: job_next_run_at
-- The earliest run_at among the given queues after the last claim began (%(since)s seconds ago),
-- as the seconds from now until then (negative: due already): an idle worker sleeps that long (or
-- until a NOTIFY). Counted on the server, whose clock set run_at: a worker host whose clock is off
-- spun on claims (ahead) or started jobs late (behind) when it compared run_at with its own. A job
-- that fell due after that claim read the queue is included (the worker claims again at once); one
-- due before it, which the claim skipped because someone holds it locked, is not (the worker
-- would spin on it).
SELECT extract(epoch FROM min(n.run_at) - coalesce(%(now)s::timestamptz, now()))::float8 AS due_in
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN generate_series(0, 3) AS p(level)
CROSS JOIN LATERAL (
    SELECT j.run_at FROM jobqueue.jobs j
    WHERE j.state IN ('pending', 'failed') AND j.queue = q.name AND j.priority = p.level
      AND j.run_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(since)s)
    ORDER BY j.run_at
    LIMIT 1
) AS n;

-- name: job_get
-- One round trip: the job, its stored result, and every attempt's error as a JSON array.
-- %(producer_id)s (NULL: any): another producer's job is no row, decided on the job's row alone,
-- so its payload, result and errors are never read and it costs what a missing id costs (a 1 MB
-- foreign job once took 12 ms against 3 ms for a missing one: its answer told it existed).
SELECT j.id, j.queue, j.job_type, j.priority, j.state, j.attempts, j.max_attempts, j.payload,
       j.run_at, j.created_at, j.updated_at, j.started_at, j.finished_at, j.idempotency_key,
       j.producer_id, j.traceparent, j.cancel_requested, j.locked_by, j.locked_until,
       r.result, r.error AS final_error, coalesce(j.duration_ms, r.duration_ms) AS duration_ms,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'attempt', e.attempt, 'error_type', e.error_type, 'message', e.message,
                   'traceback', e.traceback, 'worker_id', e.worker_id, 'failed_at', e.failed_at)
               ORDER BY e.attempt), '[]'::jsonb)
        FROM jobqueue.job_errors e WHERE e.job_id = j.id) AS errors,
       j.timeout, j.expires_at, j.deadline_at, j.dead_reason, j.scheduled_for, j.ordering_key, j.progress
FROM jobqueue.jobs j
LEFT JOIN jobqueue.job_results r ON r.job_id = j.id
WHERE j.id = %(id)s AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text);

-- name: job_outcomes
-- The state of each given job and its result once completed (missing ids are left out): what a
-- submission answers for jobs that already held their idempotency keys, in one statement.
SELECT j.id, j.state, r.result
FROM jobqueue.jobs j
LEFT JOIN jobqueue.job_results r ON r.job_id = j.id AND r.outcome = 'completed' AND j.state = 'completed'
WHERE j.id = ANY(%(ids)s::uuid[]);

-- name: job_cancel
-- Cancel as seen by %(producer_id)s: another producer's job does not exist for it (NULL: any job,
-- for admins and Python callers). One round trip, ownership checked in the same statement.
SELECT coalesce((SELECT jobqueue.cancel(j.id) FROM jobqueue.jobs j
                 WHERE j.id = %(id)s::uuid
                   AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)),
                'not_found') AS outcome;

-- name: job_cancel_requested_among
-- The worker's check of a jobqueue_cancel NOTIFY: which of these running jobs really had their
-- cancel requested. Anyone may send that notification, so the flag is taken from the row only.
SELECT j.id FROM jobqueue.jobs j
WHERE j.id = ANY(%(ids)s::uuid[]) AND j.cancel_requested AND j.state = 'processing';

-- name: job_transaction_begin
-- The first statement of a handler's transaction (job.transaction(), jobqueue.worker.transactions):
-- its statements and its idle time are bounded by what is left of the attempt's deadline
-- (%(timeout_ms)s), settings local to the transaction (behind PgBouncer too).
SELECT set_config('statement_timeout', %(timeout_ms)s, true),
       set_config('idle_in_transaction_session_timeout', %(timeout_ms)s, true);

-- name: job_complete_in_transaction
-- The completion of an attempt whose handler wrote in job.transaction(): run in that transaction
-- just before its commit, so the handler's writes, the job's completion and its result commit
-- together or not at all. Guarded as job_complete_many (the attempt this worker holds, or one the
-- sweeper put back that nobody took since), and also refused once a cancel was requested or, for
-- a running attempt, past its deadline (clock_timestamp(): now() is the transaction's start). It
-- waits for the job's row lock, as a commit has nothing else to do. completed false: the caller
-- rolls back; cancel_requested says why when it is the reason.
WITH done AS (
    UPDATE jobqueue.jobs AS j
    SET state = 'completed', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
        locked_by = %(worker_id)s, locked_until = NULL, deadline_at = NULL, duration_ms = %(duration_ms)s
    WHERE j.id = %(id)s AND j.attempts = %(attempt)s AND NOT j.cancel_requested
      AND ((j.state = 'processing' AND j.locked_by = %(worker_id)s AND j.deadline_at > clock_timestamp())
           OR (j.state = 'pending' AND j.locked_by IS NULL))
    RETURNING j.id
), stored AS (
    INSERT INTO jobqueue.job_results (job_id, outcome, result, duration_ms, worker_id)
    SELECT d.id, 'completed', %(result)s::jsonb, %(duration_ms)s, %(worker_id)s FROM done d
    WHERE %(result)s::text IS NOT NULL
    ON CONFLICT (job_id) DO NOTHING
)
SELECT EXISTS (SELECT FROM done) AS completed,
       coalesce((SELECT j.cancel_requested FROM jobqueue.jobs j WHERE j.id = %(id)s), false) AS cancel_requested;

-- name: job_progress_many
-- The latest progress of each running attempt (id, attempt) that reported some, coalesced by the
-- worker (jobqueue.worker.progress: a few writes per second at most), on the job's row for the
-- attempt this worker holds — or has just finished (completed, dead-lettered or cancelled: it
-- keeps who finished it), so a short job's last report is not lost to its ack — with the server's
-- time, and a job.progress event while an event stream is open. The figures are checked again (a forged call writes no NaN, infinity, negative
-- or huge number, nor a long message: such a report is dropped). A row another transaction holds
-- locked is passed over (SKIP LOCKED: an ack or a cancel never waits for a report), and the next
-- report writes it. updated_at is left alone: progress is not a change of state.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::integer[], %(done)s::float8[], %(totals)s::float8[],
                         %(messages)s::text[]) AS p(id, attempt, done, total, message)
    WHERE p.done >= 0 AND p.done <= 1e15
      AND (p.total IS NULL OR (p.total > 0 AND p.total <= 1e15 AND p.done <= p.total))
      AND (p.message IS NULL OR length(p.message) <= 1000)
), mine AS (
    SELECT j.id
    FROM input p JOIN jobqueue.jobs j ON j.id = p.id
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.attempts = p.attempt
      AND j.state IN ('processing', 'completed', 'dead_letter', 'cancelled') AND j.locked_by = %(worker_id)s
    FOR NO KEY UPDATE OF j SKIP LOCKED
), written AS (
    UPDATE jobqueue.jobs AS j
    SET progress = jsonb_build_object('done', p.done, 'total', p.total, 'message', p.message, 'at', now(),
                                      'attempt', p.attempt)
    FROM input p
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine)) AND j.id = p.id
    RETURNING j.id, j.queue, j.producer_id
)
SELECT (SELECT count(*) FROM written) AS written,
       (SELECT count(*) FROM (SELECT jobqueue.emit_job_events(array_agg('job.progress'::text), array_agg(w.queue),
                                                              array_agg(w.producer_id), array_agg(w.id))
                              FROM written w
                              HAVING count(*) > 0 AND jobqueue.job_events_wanted()) AS e) AS announced;
