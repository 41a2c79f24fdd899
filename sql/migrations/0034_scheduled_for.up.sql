-- 0034_scheduled_for: a cron job knows the tick it fired for. Its run_at is that tick only until a
-- retry moves it on, and schedule_fires (which names the job of each tick) is pruned and has no
-- index by job, so the tick becomes a column of the job, NULL for every job a schedule did not fire
-- (`schedules run-now` included: that job is not a tick). Claims return it (Job.scheduled_for).
-- A nullable column without a default: a catalog change, no table rewrite, nothing stored for the
-- jobs that have none.
ALTER TABLE jobqueue.jobs ADD COLUMN scheduled_for timestamptz;
COMMENT ON COLUMN jobqueue.jobs.scheduled_for IS 'The cron tick a schedule fired this job for (jobqueue.schedule_fires.fire_at); NULL: not fired by a schedule.';

-- fire_schedule as 0002 wrote it, and each fired job's scheduled_for set to its tick, in the same
-- transaction as its fire row and its insert.
CREATE OR REPLACE FUNCTION jobqueue.fire_schedule(
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
            UPDATE jobqueue.jobs AS j SET scheduled_for = tick WHERE j.id = job.id;
            fire_at := tick;
            job_id := job.id;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;
