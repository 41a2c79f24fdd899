-- 0034_scheduled_for undone: fire_schedule as 0002 wrote it, and no scheduled_for column.
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
            fire_at := tick;
            job_id := job.id;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

ALTER TABLE jobqueue.jobs DROP COLUMN scheduled_for;
