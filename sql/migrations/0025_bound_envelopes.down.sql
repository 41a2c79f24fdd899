DROP TABLE jobqueue.encryption_keys;

CREATE OR REPLACE FUNCTION jobqueue.enqueue_many_unchecked(jobs jsonb) RETURNS TABLE(id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    inputs jobqueue.job_input[];
    keyed integer;
    bad integer;       -- ord of the first job with a problem
    problem text[];
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM jobqueue.invalid('jobs', 'must be a JSON array of job objects');
    END IF;
    IF jsonb_array_length(jobs) > 10000 THEN
        PERFORM jobqueue.invalid('jobs', format('must hold at most 10000 jobs (got %s)', jsonb_array_length(jobs)));
    END IF;
    -- Every job validated and resolved in one query (the OFFSET 0 fences keep each field read
    -- once per job, and the ids made in the jobs' order whatever join the planner picks); nothing
    -- is written unless all of them are valid. (Fields it does not know are ignored: finding them,
    -- jsonb - text[] per job, cost 6 % of a bulk enqueue's CPU; Python and REST refuse them.)
    BEGIN
        SELECT min(v.ord) FILTER (WHERE v.problem IS NOT NULL),
               (array_agg(v.problem ORDER BY v.ord) FILTER (WHERE v.problem IS NOT NULL))[1:1],
               count(*) FILTER (WHERE v.idempotency_key IS NOT NULL),
               coalesce(array_agg(jobqueue.resolve_job(
                   v.ord, v.id, v.job_type, v.payload, v.priority, jobqueue.due_at(v.run_at), v.delay, v.queue,
                   v.max_attempts, v.idempotency_key, v.producer_id, v.traceparent, v.timeout, v.expires_at,
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts) ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, coalesce(
                           jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue,
                                                f.max_attempts, f.idempotency_key, f.timeout, f.expires_at,
                                                f.expire_after, f.idempotency_window, f.idempotency_mismatch,
                                                f.producer_id, f.traceparent, f.payload),
                           jobqueue.zoneless_problem('run_at', f.run_at_text),
                           jobqueue.zoneless_problem('expires_at', f.expires_at_text)) AS problem
                FROM (SELECT e.ord::integer AS ord, jobqueue.uuid_v7(e.ord) AS id,
                             e.job->>'job_type' AS job_type, e.job->'payload' AS payload,
                             e.job->>'priority' AS priority, e.job->>'run_at' AS run_at_text,
                             (e.job->>'run_at')::timestamptz AS run_at,
                             (e.job->>'delay')::interval AS delay, coalesce(e.job->>'queue', 'default') AS queue,
                             (e.job->>'max_attempts')::integer AS max_attempts,
                             e.job->>'idempotency_key' AS idempotency_key, e.job->>'producer_id' AS producer_id,
                             e.job->>'traceparent' AS traceparent, (e.job->>'timeout')::interval AS timeout,
                             e.job->>'expires_at' AS expires_at_text,
                             (e.job->>'expires_at')::timestamptz AS expires_at,
                             (e.job->>'expire_after')::interval AS expire_after,
                             (e.job->>'idempotency_window')::interval AS idempotency_window,
                             e.job->>'idempotency_mismatch' AS idempotency_mismatch
                      FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)
                      OFFSET 0) AS f
                OFFSET 0) AS v
          LEFT JOIN jobqueue.task_defaults d ON d.job_type = v.job_type;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                   OR invalid_text_representation OR numeric_value_out_of_range THEN
        PERFORM jobqueue.name_bad_job_field(jobs);
        RAISE;
    END;
    IF bad IS NOT NULL THEN
        IF jsonb_typeof(jobs->(bad - 1)) <> 'object' THEN
            PERFORM jobqueue.invalid(format('jobs[%s]', bad - 1),
                                     format('must be a JSON object (got %s)', jsonb_typeof(jobs->(bad - 1))));
        END IF;
        PERFORM jobqueue.invalid(format('jobs[%s].%s', bad - 1, problem[1][1]), problem[1][2]);
    END IF;
    IF EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now()) THEN  -- empty while nothing is full
        PERFORM jobqueue.refuse_gated_queues(ARRAY(SELECT DISTINCT i.queue FROM unnest(inputs) AS i));
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
END $$;


DROP FUNCTION jobqueue.given_id_problem(text);
