-- Cron schedules and maintenance: DDL of revision 0002_schedules.
--
-- * jobqueue.schedules: one row per cron schedule, however it was made (Python @queue.periodic,
--   CLI, REST or a plain INSERT). A BEFORE trigger validates every write the same way (SQLSTATE
--   22023 naming the field, like enqueue) and NOTIFYs jobqueue_schedules so the scheduler wakes.
-- * jobqueue.schedule_fires: one row per (schedule, fire time), written in the same transaction
--   as the job it created. Its primary key is what makes a fire create exactly one job, whatever
--   happens to leadership; jobqueue.fire_schedule() also advances next_fire_at compare-and-set.
-- * jobqueue.queue_retention: per-queue overrides of how long finished jobs are kept.
-- * jobs_finished_idx: lets the pruner find old finished jobs per state and queue without
--   reading live ones. Its cost is one index entry per finished job (measured: README).
-- * workers.heartbeat_interval: each worker's own beat, so lost-worker detection scales with it.

-- ---------------------------------------------------------------------------------------------
-- Validation shared by the trigger (and usable from psql): NULL when fine, else the problem.
-- croniter, on the Python side, is the full check; this one refuses what is plainly wrong.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION jobqueue.timezone_problem(zone text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN zone IS NULL OR btrim(zone) = '' THEN 'must be an IANA time zone name such as Europe/Berlin or UTC'
        WHEN zone = 'UTC' OR EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names t WHERE t.name = zone) THEN NULL
        ELSE format('unknown time zone %L: use an IANA name such as Europe/Berlin or UTC', zone)
    END
$$;
COMMENT ON FUNCTION jobqueue.timezone_problem(text) IS 'NULL when zone is an IANA time zone name PostgreSQL knows, else why not.';

CREATE FUNCTION jobqueue.cron_problem(expression text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    names constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week', 'second'];
    lows constant integer[] := ARRAY[0, 0, 1, 1, 0, 0];
    highs constant integer[] := ARRAY[59, 23, 31, 12, 7, 59];
    months constant text[] := ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
    days constant text[] := ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    fields text[];
    item text;
    part text;
    parts text[];
    value integer;
    i integer;
BEGIN
    IF expression IS NULL OR btrim(expression) = '' THEN
        RETURN 'must be a cron expression such as ''*/5 * * * *''';
    END IF;
    IF lower(btrim(expression)) IN ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly') THEN
        RETURN NULL;
    END IF;
    fields := regexp_split_to_array(lower(btrim(expression)), '\s+');
    IF cardinality(fields) NOT IN (5, 6) THEN
        RETURN format('must have 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds last), got %s',
                      cardinality(fields));
    END IF;
    FOR i IN 1 .. cardinality(fields) LOOP
        FOREACH item IN ARRAY string_to_array(fields[i], ',') LOOP
            -- croniter's special forms: ? and L, nW in day-of-month; Ln and n#k in day-of-week.
            CONTINUE WHEN i IN (3, 5) AND item = '?';
            CONTINUE WHEN i = 3 AND item ~ '^(l|[0-9]{1,2}w)$';
            CONTINUE WHEN i = 5 AND item ~ '^(l[0-7]|([0-7]|[a-z]{3})#[1-5])$';
            parts := regexp_match(item, '^(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?$');
            IF parts IS NULL OR parts[2]::integer = 0 THEN
                RETURN format('%s field %L is not valid', names[i], item);
            END IF;
            CONTINUE WHEN parts[1] = '*';
            FOREACH part IN ARRAY string_to_array(parts[1], '-') LOOP
                value := CASE
                    WHEN part ~ '^[0-9]{1,2}$' THEN part::integer
                    WHEN i = 4 THEN array_position(months, part)
                    WHEN i = 5 THEN array_position(days, part) - 1
                END;
                IF value IS NULL OR value NOT BETWEEN lows[i] AND highs[i] THEN
                    RETURN format('%s field %L: %L is not a value from %s to %s%s', names[i], item, part, lows[i], highs[i],
                                  CASE i WHEN 4 THEN ' or jan-dec' WHEN 5 THEN ' or sun-sat' ELSE '' END);
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION jobqueue.cron_problem(text) IS 'NULL when expression looks like a 5- or 6-field croniter expression (or an @alias), else why not.';

-- ---------------------------------------------------------------------------------------------
-- Schedules
-- ---------------------------------------------------------------------------------------------
CREATE TABLE jobqueue.schedules (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    cron            text        NOT NULL,
    timezone        text        NOT NULL DEFAULT 'UTC',
    job_type        text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority        text        NOT NULL DEFAULT 'normal',
    queue           text        NOT NULL DEFAULT 'default',
    max_attempts    integer,
    enabled         boolean     NOT NULL DEFAULT true,
    misfire_policy  text        NOT NULL DEFAULT 'fire_once',
    misfire_limit   integer     NOT NULL DEFAULT 100,
    next_fire_at    timestamptz,
    last_fire_at    timestamptz,
    error           text,
    source          text        NOT NULL DEFAULT 'sql',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_priority_known CHECK (priority IN ('critical', 'high', 'normal', 'low')),
    CONSTRAINT schedules_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT schedules_misfire_policy_known CHECK (misfire_policy IN ('fire_once', 'fire_all', 'skip')),
    CONSTRAINT schedules_misfire_limit_positive CHECK (misfire_limit >= 1),
    CONSTRAINT schedules_source_known CHECK (source IN ('python', 'cli', 'api', 'sql'))
);
COMMENT ON TABLE jobqueue.schedules IS 'Cron schedules. next_fire_at NULL: the scheduler computes it (from updated_at) — so a plain INSERT needs only name, cron and job_type. misfire_policy after downtime: fire_once (one job for the missed ticks), fire_all (each missed tick, the latest misfire_limit of them) or skip. error: why the scheduler could not use the row (fix cron to clear it).';
COMMENT ON COLUMN jobqueue.schedules.cron IS 'croniter syntax: minute hour day-of-month month day-of-week [second], or @hourly/@daily/@weekly/@monthly/@yearly.';
COMMENT ON COLUMN jobqueue.schedules.max_attempts IS 'NULL: the job type''s default (jobqueue.task_defaults), else 4.';

-- The scheduler's due query: enabled, usable schedules by next fire.
CREATE INDEX schedules_due_idx ON jobqueue.schedules (next_fire_at) WHERE enabled AND error IS NULL;

CREATE FUNCTION jobqueue.schedules_before_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    problem text;
    redefined boolean := TG_OP = 'INSERT' OR (NEW.cron, NEW.timezone) IS DISTINCT FROM (OLD.cron, OLD.timezone);
BEGIN
    IF NEW.name IS NULL OR btrim(NEW.name) = '' THEN
        PERFORM jobqueue.invalid('name', 'must be a non-empty string');
    END IF;
    IF redefined THEN
        problem := jobqueue.cron_problem(NEW.cron);
        IF problem IS NOT NULL THEN
            PERFORM jobqueue.invalid('cron', problem);
        END IF;
        problem := jobqueue.timezone_problem(NEW.timezone);
        IF problem IS NOT NULL THEN
            PERFORM jobqueue.invalid('timezone', problem);
        END IF;
    END IF;
    IF NEW.job_type IS NULL OR btrim(NEW.job_type) = '' THEN
        PERFORM jobqueue.invalid('job_type', 'must be a non-empty string');
    END IF;
    IF NEW.queue IS NULL OR btrim(NEW.queue) = '' THEN
        PERFORM jobqueue.invalid('queue', 'must be a non-empty string');
    END IF;
    NEW.priority := jobqueue.priority_name(jobqueue.priority_level(NEW.priority));
    IF NEW.max_attempts < 1 THEN
        PERFORM jobqueue.invalid('max_attempts', format('must be at least 1 (got %s)', NEW.max_attempts));
    END IF;
    IF NEW.misfire_policy IS NULL OR NEW.misfire_policy NOT IN ('fire_once', 'fire_all', 'skip') THEN
        PERFORM jobqueue.invalid('misfire_policy', format('must be one of fire_once, fire_all, skip (got %L)', NEW.misfire_policy));
    END IF;
    IF NEW.misfire_limit IS NULL OR NEW.misfire_limit < 1 THEN
        PERFORM jobqueue.invalid('misfire_limit', format('must be at least 1 (got %s)', NEW.misfire_limit));
    END IF;
    NEW.payload := coalesce(NEW.payload, '{}'::jsonb);

    IF TG_OP = 'UPDATE' THEN
        -- A new definition, or a resume, starts from now: the scheduler recomputes next_fire_at
        -- unless this statement set it itself. Ticks during a pause are not fired.
        IF redefined OR (NEW.enabled AND NOT OLD.enabled) THEN
            NEW.error := NULL;
            IF NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
                NEW.next_fire_at := NULL;
            END IF;
        END IF;
        IF (NEW.name, NEW.cron, NEW.timezone, NEW.job_type, NEW.payload, NEW.priority, NEW.queue, NEW.max_attempts,
            NEW.enabled, NEW.misfire_policy, NEW.misfire_limit)
           IS DISTINCT FROM
           (OLD.name, OLD.cron, OLD.timezone, OLD.job_type, OLD.payload, OLD.priority, OLD.queue, OLD.max_attempts,
            OLD.enabled, OLD.misfire_policy, OLD.misfire_limit) THEN
            NEW.updated_at := now();
        END IF;
    END IF;

    -- Wake the scheduler when this row may now fire earlier than it planned.
    IF NEW.enabled AND NEW.error IS NULL AND (
           TG_OP = 'INSERT' OR NOT OLD.enabled OR NEW.next_fire_at IS NULL OR NEW.next_fire_at < OLD.next_fire_at) THEN
        PERFORM pg_notify('jobqueue_schedules', NEW.name);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER schedules_validate BEFORE INSERT OR UPDATE ON jobqueue.schedules
    FOR EACH ROW EXECUTE FUNCTION jobqueue.schedules_before_write();

CREATE TABLE jobqueue.schedule_fires (
    schedule_id  bigint      NOT NULL REFERENCES jobqueue.schedules (id) ON DELETE CASCADE,
    fire_at      timestamptz NOT NULL,
    job_id       uuid        NOT NULL,
    fired_at     timestamptz NOT NULL DEFAULT now(),
    fired_by     text,
    PRIMARY KEY (schedule_id, fire_at)
);
COMMENT ON TABLE jobqueue.schedule_fires IS 'One row per fire: the tick (fire_at), the job it created and which scheduler created it. The primary key makes each tick create one job at most.';

-- Fires a schedule, compare-and-set: only when its next_fire_at (and definition) is still what the
-- caller planned from, so of several schedulers racing for the same tick one wins and the others
-- do nothing. Each tick gets its fire row and its job in this one transaction; a tick that already
-- has a fire row is skipped. Returns the ticks fired and their jobs (none: lost the race).
CREATE FUNCTION jobqueue.fire_schedule(
    schedule_id bigint, expected_next timestamptz, expected_cron text, expected_timezone text,
    ticks timestamptz[], next_fire timestamptz, fired_by text
) RETURNS TABLE (fire_at timestamptz, job_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s jobqueue.schedules;
    tick timestamptz;
    job jobqueue.job_input;
BEGIN
    UPDATE jobqueue.schedules AS sc
    SET next_fire_at = fire_schedule.next_fire,
        last_fire_at = greatest(sc.last_fire_at, (SELECT max(t) FROM unnest(fire_schedule.ticks) AS t))
    WHERE sc.id = fire_schedule.schedule_id
      AND sc.enabled AND sc.error IS NULL
      AND sc.next_fire_at IS NOT DISTINCT FROM fire_schedule.expected_next
      AND sc.cron = fire_schedule.expected_cron AND sc.timezone = fire_schedule.expected_timezone
    RETURNING sc.* INTO s;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOREACH tick IN ARRAY coalesce(fire_schedule.ticks, '{}') LOOP
        job := jobqueue.make_job_input(NULL, s.job_type, s.payload, s.priority, tick, NULL, s.queue,
                                       s.max_attempts, NULL, 'schedule:' || s.name, NULL);
        INSERT INTO jobqueue.schedule_fires AS f (schedule_id, fire_at, job_id, fired_by)
        VALUES (s.id, tick, job.id, fire_schedule.fired_by)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM jobqueue.insert_jobs(ARRAY[job]);
            fire_at := tick;
            job_id := job.id;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Retention
-- ---------------------------------------------------------------------------------------------
CREATE TABLE jobqueue.queue_retention (
    queue        text        PRIMARY KEY,
    completed    interval,
    cancelled    interval,
    dead_letter  interval,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_retention_not_negative CHECK (
        completed >= interval '0' AND cancelled >= interval '0' AND dead_letter >= interval '0')
);
COMMENT ON TABLE jobqueue.queue_retention IS 'Per queue: how long finished jobs are kept before the pruner deletes them (with their results and errors). NULL: the default (JOBQUEUE_RETENTION_*: completed 30 days, cancelled 7, dead_letter 90). Live jobs (pending, processing, failed = waiting for a retry) are never pruned.';

CREATE INDEX jobs_finished_idx ON jobqueue.jobs (state, queue, finished_at)
    WHERE state IN ('completed', 'cancelled', 'dead_letter');

-- ---------------------------------------------------------------------------------------------
-- Worker registry
-- ---------------------------------------------------------------------------------------------
ALTER TABLE jobqueue.workers ADD COLUMN heartbeat_interval real NOT NULL DEFAULT 10;
COMMENT ON COLUMN jobqueue.workers.heartbeat_interval IS 'Seconds between this worker''s heartbeats; three missed beats mark it lost.';
