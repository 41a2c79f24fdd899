-- Cron schedules (jobqueue.schedules) and their fires (jobqueue.schedule_fires).
-- Writes go through the table's trigger, which validates them and NOTIFYs the scheduler.

-- name: schedule_insert
-- A new schedule; no row when the name is taken. An operator's changes of schedules (this and the
-- writes below; not the workers' own, schedule_sync and the scheduler's fires) are recorded in the
-- audit log: schedule.add, schedule.change, schedule.pause, schedule.resume, schedule.remove,
-- schedule.run — the definition without its payload.
WITH added AS (
    INSERT INTO jobqueue.schedules AS s (name, cron, timezone, job_type, payload, priority, queue, max_attempts,
                                         enabled, misfire_policy, misfire_limit, next_fire_at, source)
    VALUES (%(name)s, %(cron)s, %(timezone)s, %(job_type)s, %(payload)s::jsonb, %(priority)s, %(queue)s,
            %(max_attempts)s::integer, %(enabled)s, %(misfire_policy)s, %(misfire_limit)s,
            %(next_fire_at)s::timestamptz, %(source)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING s.*
)
SELECT a.id, a.name, a.cron, a.timezone, a.job_type, a.payload, a.priority, a.queue, a.max_attempts, a.enabled,
          a.misfire_policy, a.misfire_limit, a.next_fire_at, a.last_fire_at, a.error, a.source, a.created_at,
          a.updated_at
FROM added a CROSS JOIN LATERAL jobqueue.audit('schedule.add', a.name, jsonb_build_object(
    'cron', a.cron, 'timezone', a.timezone, 'job_type', a.job_type, 'queue', a.queue, 'priority', a.priority,
    'max_attempts', a.max_attempts, 'enabled', a.enabled, 'misfire_policy', a.misfire_policy, 'source', a.source)) AS recorded;

-- name: schedule_put
-- Create or redefine a schedule by name. `enabled` is only set on creation (pause/resume own it
-- afterwards); next_fire_at only when the expression or zone changed. A row that already holds
-- this definition is not written at all (nor recorded), and is returned as it is (both branches
-- are whole table rows, so the column list is written once, at the end). xmax = 0: inserted.
WITH put AS (
    INSERT INTO jobqueue.schedules AS s (name, cron, timezone, job_type, payload, priority, queue, max_attempts,
                                         enabled, misfire_policy, misfire_limit, next_fire_at, source)
    VALUES (%(name)s, %(cron)s, %(timezone)s, %(job_type)s, %(payload)s::jsonb, %(priority)s, %(queue)s,
            %(max_attempts)s::integer, %(enabled)s, %(misfire_policy)s, %(misfire_limit)s,
            %(next_fire_at)s::timestamptz, %(source)s)
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, job_type = EXCLUDED.job_type, payload = EXCLUDED.payload,
        priority = EXCLUDED.priority, queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts,
        misfire_policy = EXCLUDED.misfire_policy, misfire_limit = EXCLUDED.misfire_limit, source = EXCLUDED.source,
        next_fire_at = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone)
                            THEN EXCLUDED.next_fire_at ELSE s.next_fire_at END
    WHERE (s.cron, s.timezone, s.job_type, s.payload, s.priority, s.queue, s.max_attempts, s.misfire_policy,
           s.misfire_limit, s.source)
          IS DISTINCT FROM
          (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.job_type, EXCLUDED.payload, EXCLUDED.priority, EXCLUDED.queue,
           EXCLUDED.max_attempts, EXCLUDED.misfire_policy, EXCLUDED.misfire_limit, EXCLUDED.source)
    RETURNING s.*, jobqueue.audit(CASE WHEN s.xmax = 0 THEN 'schedule.add' ELSE 'schedule.change' END, s.name,
                                  jsonb_build_object(
    'cron', s.cron, 'timezone', s.timezone, 'job_type', s.job_type, 'queue', s.queue, 'priority', s.priority,
    'max_attempts', s.max_attempts, 'enabled', s.enabled, 'misfire_policy', s.misfire_policy, 'source', s.source)) AS recorded
), schedule AS (
    SELECT * FROM put
    UNION ALL
    SELECT *, NULL::bigint FROM jobqueue.schedules WHERE name = %(name)s AND NOT EXISTS (SELECT 1 FROM put)
)
SELECT id, name, cron, timezone, job_type, payload, priority, queue, max_attempts, enabled, misfire_policy,
       misfire_limit, next_fire_at, last_fire_at, error, source, created_at, updated_at
FROM schedule;

-- name: schedule_sync
-- The schedules a worker app declares (@queue.periodic), at worker start: created or redefined,
-- as schedule_put does, in one statement. Rows already holding their definition are filtered out
-- before the INSERT, so a restart of many workers writes (and validates) nothing.
INSERT INTO jobqueue.schedules AS s (name, cron, timezone, job_type, payload, priority, queue, max_attempts,
                                     enabled, misfire_policy, misfire_limit, next_fire_at, source)
SELECT d.name, d.cron, d.timezone, d.job_type, d.payload, d.priority, d.queue, d.max_attempts, d.enabled,
       d.misfire_policy, d.misfire_limit, d.next_fire_at, 'python'
FROM unnest(%(names)s::text[], %(crons)s::text[], %(timezones)s::text[], %(job_types)s::text[],
            %(payloads)s::jsonb[], %(priorities)s::text[], %(queues)s::text[], %(max_attempts)s::integer[],
            %(enabled)s::boolean[], %(misfire_policies)s::text[], %(misfire_limits)s::integer[],
            %(next_fire_ats)s::timestamptz[])
     AS d(name, cron, timezone, job_type, payload, priority, queue, max_attempts, enabled, misfire_policy,
          misfire_limit, next_fire_at)
WHERE NOT EXISTS (
    SELECT 1 FROM jobqueue.schedules e
    WHERE e.name = d.name
      AND (e.cron, e.timezone, e.job_type, e.payload, e.priority, e.queue, e.max_attempts, e.misfire_policy,
           e.misfire_limit, e.source)
          IS NOT DISTINCT FROM
          (d.cron, d.timezone, d.job_type, d.payload, d.priority, d.queue, d.max_attempts, d.misfire_policy,
           d.misfire_limit, 'python'))
ORDER BY d.name
ON CONFLICT (name) DO UPDATE
SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, job_type = EXCLUDED.job_type, payload = EXCLUDED.payload,
    priority = EXCLUDED.priority, queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts,
    misfire_policy = EXCLUDED.misfire_policy, misfire_limit = EXCLUDED.misfire_limit, source = EXCLUDED.source,
    next_fire_at = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone)
                        THEN EXCLUDED.next_fire_at ELSE s.next_fire_at END
RETURNING s.name;

-- name: schedule_list
SELECT id, name, cron, timezone, job_type, payload, priority, queue, max_attempts, enabled, misfire_policy,
       misfire_limit, next_fire_at, last_fire_at, error, source, created_at, updated_at
FROM jobqueue.schedules
ORDER BY name;

-- name: schedule_get
SELECT id, name, cron, timezone, job_type, payload, priority, queue, max_attempts, enabled, misfire_policy,
       misfire_limit, next_fire_at, last_fire_at, error, source, created_at, updated_at
FROM jobqueue.schedules
WHERE name = %(name)s;

-- name: schedule_set_enabled
-- Pause or resume. On resume the trigger clears next_fire_at, so the scheduler plans from now:
-- ticks missed while paused are not fired.
WITH changed AS (
    UPDATE jobqueue.schedules AS s
    SET enabled = %(enabled)s
    WHERE s.name = %(name)s
    RETURNING s.id, s.name, s.cron, s.timezone, s.job_type, s.payload, s.priority, s.queue, s.max_attempts, s.enabled,
              s.misfire_policy, s.misfire_limit, s.next_fire_at, s.last_fire_at, s.error, s.source, s.created_at,
              s.updated_at
)
SELECT c.*
FROM changed c CROSS JOIN LATERAL jobqueue.audit(CASE WHEN c.enabled THEN 'schedule.resume' ELSE 'schedule.pause' END,
                                                 c.name, '{}'::jsonb) AS recorded;

-- name: schedule_delete
WITH gone AS (
    DELETE FROM jobqueue.schedules WHERE name = %(name)s RETURNING *
)
SELECT g.name FROM gone g CROSS JOIN LATERAL jobqueue.audit('schedule.remove', g.name, jsonb_build_object(
    'cron', g.cron, 'timezone', g.timezone, 'job_type', g.job_type, 'queue', g.queue, 'priority', g.priority,
    'max_attempts', g.max_attempts, 'enabled', g.enabled, 'misfire_policy', g.misfire_policy, 'source', g.source)) AS recorded;

-- name: schedule_run_now
-- One extra job from the schedule's definition, now, outside its ticks (no fire row).
SELECT r.id
FROM (SELECT s.name,
             jobqueue.enqueue(s.job_type, s.payload, s.priority, queue => s.queue, max_attempts => s.max_attempts,
                              producer_id => 'schedule:' || s.name) AS id
      FROM jobqueue.schedules s
      WHERE s.name = %(name)s) AS r
CROSS JOIN LATERAL jobqueue.audit('schedule.run', r.name, jsonb_build_object('job_id', r.id)) AS recorded;

-- name: schedule_due
-- What the scheduler must look at now: due schedules, and new or redefined ones (next_fire_at
-- NULL, computed from updated_at).
SELECT id, name, cron, timezone, next_fire_at, updated_at, misfire_policy, misfire_limit
FROM jobqueue.schedules
WHERE enabled AND error IS NULL
  AND (next_fire_at IS NULL OR next_fire_at <= coalesce(%(now)s::timestamptz, now()))
ORDER BY next_fire_at NULLS FIRST
LIMIT %(limit)s;

-- name: schedule_next_due
SELECT min(next_fire_at) FROM jobqueue.schedules WHERE enabled AND error IS NULL;

-- name: schedule_fire
SELECT fire_at, job_id
FROM jobqueue.fire_schedule(%(id)s, %(expected_next)s::timestamptz, %(cron)s, %(timezone)s,
                            %(ticks)s::timestamptz[], %(next_fire_at)s::timestamptz, %(fired_by)s);

-- name: schedule_set_error
-- The scheduler cannot use this definition (croniter refused what the SQL check let through):
-- park the row with the reason until its expression or zone is changed.
UPDATE jobqueue.schedules
SET error = %(error)s, next_fire_at = NULL
WHERE id = %(id)s AND cron = %(cron)s AND timezone = %(timezone)s
RETURNING name;

-- name: schedule_fires_prune
-- Fire history older than the cutoff, a bounded batch at a time (per schedule, along its key).
WITH victims AS (
    SELECT f.schedule_id, f.fire_at
    FROM jobqueue.schedules s
    CROSS JOIN LATERAL (
        SELECT schedule_id, fire_at FROM jobqueue.schedule_fires
        WHERE schedule_id = s.id AND fire_at < %(before)s
        ORDER BY fire_at
        LIMIT %(limit)s
    ) f
    LIMIT %(limit)s
), gone AS (
    DELETE FROM jobqueue.schedule_fires f USING victims v
    WHERE f.schedule_id = v.schedule_id AND f.fire_at = v.fire_at
    RETURNING 1
)
SELECT count(*) FROM gone;
