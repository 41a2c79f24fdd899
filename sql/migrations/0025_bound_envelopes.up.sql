-- Payload encryption binds every value to its job (issue 18; jobqueue.encryption, format 2): AES-GCM
-- associated data names the job's producer, type and id and the value's field, so a ciphertext
-- copied into another job opens nowhere.
--
-- 1. A producer that seals a job's fields must know the job's id before the INSERT, which assigned
--    it until now: enqueue_many takes an "id" per job, a version-7 UUID (time-ordered, as
--    uuid_v7() makes them) whose time is within an hour of the database's clock. A live job already
--    holding the id makes the insert fail (the primary key); a job pruned long ago cannot hand its
--    id to a new one, which would then open the old job's ciphertext (the id is too old by then).
--    The one-job enqueue() takes no id: producers that seal in SQL use enqueue_many.
-- 2. jobqueue.encryption_keys: every key id `jobqueue keys rotate` has found in its key ring, so
--    that it tells values under a key once held and since dropped (it exits 1: add the key back)
--    from values under an id no ring ever held (anyone who may enqueue can write one: reported
--    apart, not a reason to fail every run).

CREATE FUNCTION jobqueue.given_id_problem(id text) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    -- The first 12 hex digits of a version-7 UUID are its Unix time in milliseconds.
    SELECT CASE
        WHEN id IS NULL THEN NULL
        WHEN id !~* '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
            THEN ARRAY['id', format('must be a version-7 UUID, e.g. 0190b8e2-7c4a-7d3e-9f10-2a3b4c5d6e7f (got %L): '
                                    'leave it out and the database makes one', left(id, 64))]
        WHEN abs(('x' || substr(id, 1, 8) || substr(id, 10, 4))::bit(48)::bigint
                 - (date_part('epoch', clock_timestamp()) * 1000)::bigint) > 3600000
            THEN ARRAY['id', format('must be made within an hour of the database''s clock (%s; the id''s time is %s)',
                                    clock_timestamp(),
                                    to_timestamp(('x' || substr(id, 1, 8) || substr(id, 10, 4))::bit(48)::bigint / 1000.0))]
    END
$$;

COMMENT ON FUNCTION jobqueue.given_id_problem(id text) IS 'Why the id a job was given at enqueue is refused (NULL: none given, or fine): not a version-7 UUID, or not made within an hour of now.';

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
    -- A job may carry its own "id" (a producer that seals fields for it made it first, 0025): a
    -- version-7 UUID made within the hour, cast only once given_id_problem() found nothing wrong.
    BEGIN
        SELECT min(v.ord) FILTER (WHERE v.problem IS NOT NULL),
               (array_agg(v.problem ORDER BY v.ord) FILTER (WHERE v.problem IS NOT NULL))[1:1],
               count(*) FILTER (WHERE v.idempotency_key IS NOT NULL),
               coalesce(array_agg(jobqueue.resolve_job(
                   v.ord, coalesce(CASE WHEN v.problem IS NULL THEN v.id_text::uuid END, v.id), v.job_type, v.payload,
                   v.priority, jobqueue.due_at(v.run_at), v.delay, v.queue,
                   v.max_attempts, v.idempotency_key, v.producer_id, v.traceparent, v.timeout, v.expires_at,
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts) ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, coalesce(
                           jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue,
                                                f.max_attempts, f.idempotency_key, f.timeout, f.expires_at,
                                                f.expire_after, f.idempotency_window, f.idempotency_mismatch,
                                                f.producer_id, f.traceparent, f.payload),
                           jobqueue.zoneless_problem('run_at', f.run_at_text),
                           jobqueue.zoneless_problem('expires_at', f.expires_at_text),
                           jobqueue.given_id_problem(f.id_text)) AS problem
                FROM (SELECT e.ord::integer AS ord, jobqueue.uuid_v7(e.ord) AS id, e.job->>'id' AS id_text,
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


CREATE TABLE jobqueue.encryption_keys (
    key_id text PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE jobqueue.encryption_keys IS 'Every key id jobqueue keys rotate has found in its key ring (no key material): a value under an id recorded here and missing from the ring needs that key back; one under an id never recorded was never sealed by jobqueue.';

GRANT SELECT, INSERT, UPDATE, DELETE ON jobqueue.encryption_keys TO jobqueue_admin;
GRANT SELECT ON jobqueue.encryption_keys TO jobqueue_worker, jobqueue_api, jobqueue_readonly;
