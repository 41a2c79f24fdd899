-- 0035: ordered work and progress (issue 21).
--
-- Ordering keys. A job enqueued with an ordering key runs only after every earlier job of the same
-- producer's key has finished (completed, dead-lettered or cancelled): one at a time, in enqueue
-- order. A key's later jobs are stored in the state 'waiting', which no claim reads (the claim
-- indexes hold pending and failed jobs only), so the claim is unchanged and a job without a key
-- pays nothing. A key's head — its one job pending, processing or failed (waiting for a retry) —
-- releases the next one when it finishes: a row trigger that fires only for jobs with a key turns
-- the oldest waiting job pending (run_at now, a NOTIFY for its queue).
-- Race-proof by one lock per (producer, key), a transaction-level advisory lock (PgBouncer's
-- transaction mode keeps it): an enqueue takes it before it looks for the key's unfinished jobs,
-- and a head's end takes it before it looks for the next; each looks in a statement of its own,
-- after the lock, so each sees what the other committed. Neither can miss the other: a job made
-- waiting is always seen by the end of the head it waits for. Both need READ COMMITTED (an older
-- snapshot would not see the other's commit): a keyed enqueue in another isolation is refused.
-- Keys are per producer (producer_id, '' for none): another producer's "customer-42" is another key.

ALTER TABLE jobqueue.jobs ADD COLUMN ordering_key text;
ALTER TABLE jobqueue.jobs ADD COLUMN progress jsonb;
COMMENT ON COLUMN jobqueue.jobs.ordering_key IS 'Jobs of one producer with the same key run one at a time, in enqueue order; the later ones wait (state waiting) until the one before them finishes.';
COMMENT ON COLUMN jobqueue.jobs.progress IS 'What the running (or last) attempt reported with job.progress(): {"done", "total", "message", "at", "attempt"}.';

ALTER TABLE jobqueue.jobs DROP CONSTRAINT jobs_state_known;
ALTER TABLE jobqueue.jobs ADD CONSTRAINT jobs_state_known
    CHECK (state = ANY (ARRAY['pending', 'processing', 'completed', 'failed', 'dead_letter', 'cancelled', 'waiting'])) NOT VALID;
ALTER TABLE jobqueue.jobs VALIDATE CONSTRAINT jobs_state_known;

-- Each key's unfinished jobs in enqueue order: the enqueue's look, the next job a head's end
-- releases. Only jobs with a key are in it.
CREATE INDEX jobs_ordering_idx ON jobqueue.jobs USING btree ((coalesce(producer_id, '')), ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND state = ANY (ARRAY['waiting', 'pending', 'processing', 'failed']);

ALTER TYPE jobqueue.job_input ADD ATTRIBUTE ordering_key text;

CREATE FUNCTION jobqueue.ordering_key_problem(ordering_key text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN ordering_key IS NULL THEN NULL
        WHEN btrim(ordering_key, E' \t\n\r\f\v') = '' THEN ARRAY['ordering_key', 'must not be blank when given']
        WHEN length(ordering_key) > 255
            THEN ARRAY['ordering_key', format('must be at most 255 characters (got %s)', length(ordering_key))]
    END
$$;

COMMENT ON FUNCTION jobqueue.ordering_key_problem(ordering_key text) IS 'Why an ordering key is refused as {field, message} (NULL: it is fine, or none was given).';

CREATE FUNCTION jobqueue.lock_ordering_key(producer text, ordering_key text) RETURNS void
    LANGUAGE sql
    AS $$
    SELECT pg_catalog.pg_advisory_xact_lock(1785790465, hashtext(coalesce(producer, '') || E'\x1f' || ordering_key))
$$;

COMMENT ON FUNCTION jobqueue.lock_ordering_key(producer text, ordering_key text) IS 'The lock of one producer''s ordering key, held to the end of the transaction: an enqueue with the key and the end of its head take it, so neither misses the other (two keys may share a lock: it only makes them wait for each other).';

CREATE FUNCTION jobqueue.ordering_waiters(jobs jobqueue.job_input[], held jsonb) RETURNS integer[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    k record;
    waiting integer[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM jobqueue.invalid('ordering_key', format(
            'a job with an ordering key is enqueued in a READ COMMITTED transaction (this one is %s)',
            current_setting('transaction_isolation')));
    END IF;
    -- Every key of the batch locked in one order (its lock id), so two enqueues never deadlock.
    FOR k IN SELECT DISTINCT coalesce(i.producer_id, '') AS producer, i.ordering_key AS key,
                    hashtext(coalesce(i.producer_id, '') || E'\x1f' || i.ordering_key) AS lock_id
             FROM unnest(jobs) AS i
             WHERE i.ordering_key IS NOT NULL AND NOT held ? i.ord::text
             ORDER BY 3, 1, 2 LOOP
        PERFORM jobqueue.lock_ordering_key(k.producer, k.key);
    END LOOP;
    -- A statement of its own after the locks: its snapshot sees every end of a head committed
    -- before them. A job waits when its key has an unfinished job, or an earlier one in this batch.
    SELECT coalesce(array_agg(w.ord), '{}') INTO waiting
    FROM (SELECT i.ord, coalesce(i.producer_id, '') AS producer, i.ordering_key,
                 row_number() OVER (PARTITION BY coalesce(i.producer_id, ''), i.ordering_key ORDER BY i.ord) AS nth
          FROM unnest(jobs) AS i
          WHERE i.ordering_key IS NOT NULL AND NOT held ? i.ord::text) AS w
    WHERE w.nth > 1
       OR EXISTS (SELECT FROM jobqueue.jobs j
                  WHERE coalesce(j.producer_id, '') = w.producer AND j.ordering_key = w.ordering_key
                    AND j.ordering_key IS NOT NULL
                    AND j.state = ANY (ARRAY['waiting', 'pending', 'processing', 'failed']));
    RETURN waiting;
END $$;

COMMENT ON FUNCTION jobqueue.ordering_waiters(jobs jobqueue.job_input[], held jsonb) IS 'For insert_jobs: the ords of the jobs to insert (not those whose idempotency key is held) that must wait for an earlier job of their ordering key; takes the keys'' locks.';

-- A finished job of a key made pending again (an operator's retry of a dead letter) waits when
-- the key has a head already: two jobs of one key never run at once. Put back to waiting after
-- the update, in the same transaction (no worker can claim it before that commits): a BEFORE
-- trigger on the table would make every update of every job fetch its old row version for it
-- first (about 1 µs a job on the drain), for a change only an operator makes.
CREATE FUNCTION jobqueue.ordering_key_revived(revived jobqueue.jobs) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM jobqueue.lock_ordering_key(revived.producer_id, revived.ordering_key);
    IF EXISTS (SELECT FROM jobqueue.jobs j
               WHERE coalesce(j.producer_id, '') = coalesce(revived.producer_id, '')
                 AND j.ordering_key = revived.ordering_key
                 AND j.state = ANY (ARRAY['waiting', 'pending', 'processing', 'failed']) AND j.id <> revived.id) THEN
        UPDATE jobqueue.jobs SET state = 'waiting' WHERE id = revived.id AND state IN ('pending', 'failed');
    END IF;
END $$;

-- The end of a key's head (completed, dead_letter, cancelled, or deleted before it finished)
-- releases the key's oldest waiting job, unless another job of the key is pending, processing or
-- failed (a dead letter retried while the key went on); a revival goes to ordering_key_revived.
CREATE FUNCTION jobqueue.ordering_key_released() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released_queue text;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.state IN ('completed', 'dead_letter', 'cancelled') THEN
        PERFORM jobqueue.ordering_key_revived(NEW);
        RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '0A000', MESSAGE = format(
            'jobqueue: job %s has an ordering key: it ends in a READ COMMITTED transaction (this one is %s)',
            OLD.id, current_setting('transaction_isolation'));
    END IF;
    PERFORM jobqueue.lock_ordering_key(OLD.producer_id, OLD.ordering_key);
    IF EXISTS (SELECT FROM jobqueue.jobs j
               WHERE coalesce(j.producer_id, '') = coalesce(OLD.producer_id, '') AND j.ordering_key = OLD.ordering_key
                 AND j.state = ANY (ARRAY['pending', 'processing', 'failed']) AND j.id <> OLD.id) THEN
        RETURN NULL;
    END IF;
    UPDATE jobqueue.jobs AS j
    SET state = 'pending', run_at = greatest(j.run_at, now()), updated_at = now()
    WHERE j.id = (SELECT w.id FROM jobqueue.jobs w
                  WHERE coalesce(w.producer_id, '') = coalesce(OLD.producer_id, '')
                    AND w.ordering_key = OLD.ordering_key AND w.state = 'waiting'
                  ORDER BY w.seq
                  LIMIT 1)
      AND j.state = 'waiting'
    RETURNING j.queue INTO released_queue;
    IF released_queue IS NOT NULL THEN
        PERFORM pg_notify('jobqueue_jobs', released_queue);
    END IF;
    RETURN NULL;
END $$;

-- One row trigger for the ends and the revivals (one WHEN to test per updated job: for a job
-- without a key, its first term).
CREATE TRIGGER jobs_ordering_released AFTER UPDATE OF state ON jobqueue.jobs FOR EACH ROW
    WHEN (OLD.ordering_key IS NOT NULL
          AND (OLD.state IN ('pending', 'processing', 'failed') AND NEW.state IN ('completed', 'dead_letter', 'cancelled')
               OR OLD.state IN ('completed', 'dead_letter', 'cancelled') AND NEW.state IN ('pending', 'failed')))
    EXECUTE FUNCTION jobqueue.ordering_key_released();
CREATE TRIGGER jobs_ordering_deleted AFTER DELETE ON jobqueue.jobs FOR EACH ROW
    WHEN (OLD.ordering_key IS NOT NULL AND OLD.state IN ('pending', 'processing', 'failed'))
    EXECUTE FUNCTION jobqueue.ordering_key_released();

-- What an operator looks at when a key does not move: each key with unfinished jobs, its head
-- and how many wait behind it (cancel the head to let the next one run).
CREATE VIEW jobqueue.ordering_keys AS
    SELECT nullif(w.producer, '') AS producer_id, w.ordering_key, h.id AS head_id, h.state AS head_state, h.queue,
           h.job_type, h.attempts, h.run_at, w.unfinished
    FROM (SELECT coalesce(j.producer_id, '') AS producer, j.ordering_key, count(*) AS unfinished
          FROM jobqueue.jobs j
          WHERE j.ordering_key IS NOT NULL AND j.state = ANY (ARRAY['waiting', 'pending', 'processing', 'failed'])
          GROUP BY 1, 2) AS w
    LEFT JOIN LATERAL (
        SELECT j.* FROM jobqueue.jobs j
        WHERE coalesce(j.producer_id, '') = w.producer AND j.ordering_key = w.ordering_key
          AND j.ordering_key IS NOT NULL AND j.state = ANY (ARRAY['pending', 'processing', 'failed'])
        ORDER BY j.seq LIMIT 1) AS h ON true;

COMMENT ON VIEW jobqueue.ordering_keys IS 'Ordering keys with unfinished jobs: the head (the job pending, running or waiting for its retry; NULL while the next is being released) and the count of unfinished jobs. Cancel the head to unblock a key.';

-- resolve_job takes the ordering key too (last, defaulted: its callers of before still fit).
DROP FUNCTION jobqueue.resolve_job(integer, uuid, text, jsonb, text, timestamptz, interval, text, integer, text, text,
                                   text, interval, timestamptz, interval, interval, text, integer);
CREATE FUNCTION jobqueue.resolve_job(ord integer, id uuid, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, default_max_attempts integer, ordering_key text DEFAULT NULL::text) RETURNS jobqueue.job_input
    LANGUAGE sql STABLE
    AS $$
    -- default_max_attempts: the job type's jobqueue.task_defaults row, looked up by the caller
    -- (a sub-select here would keep the planner from inlining this).
    SELECT ROW(coalesce(ord, 1), id, queue, job_type, coalesce(payload, '{}'::jsonb),
               CASE lower(coalesce(priority, 'normal'))
                   WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 WHEN 'low' THEN 3 END,
               coalesce(run_at, now() + delay, now()), coalesce(max_attempts, default_max_attempts, 4),
               idempotency_key, producer_id, traceparent, timeout,
               coalesce(expires_at, coalesce(run_at, now() + delay, now()) + expire_after),
               idempotency_window, coalesce(idempotency_mismatch, 'return'), ordering_key)::jobqueue.job_input
$$;

COMMENT ON FUNCTION jobqueue.resolve_job(ord integer, id uuid, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, default_max_attempts integer, ordering_key text) IS 'A valid job''s enqueue fields with their defaults applied (priority level, run_at, max_attempts, expiry); the queue''s job_ttl is applied by the insert.';

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
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts, v.ordering_key)
                   ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, coalesce(
                           jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue,
                                                f.max_attempts, f.idempotency_key, f.timeout, f.expires_at,
                                                f.expire_after, f.idempotency_window, f.idempotency_mismatch,
                                                f.producer_id, f.traceparent, f.payload),
                           jobqueue.zoneless_problem('run_at', f.run_at_text),
                           jobqueue.zoneless_problem('expires_at', f.expires_at_text),
                           jobqueue.given_id_problem(f.id_text),
                           jobqueue.ordering_key_problem(f.ordering_key)) AS problem
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
                             e.job->>'idempotency_mismatch' AS idempotency_mismatch,
                             e.job->>'ordering_key' AS ordering_key
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

CREATE OR REPLACE FUNCTION jobqueue.insert_jobs(jobs jobqueue.job_input[], keyed integer DEFAULT NULL::integer) RETURNS TABLE(ord integer, id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    todo jobqueue.job_input[] := jobs;
    inserted integer;
    held jsonb := '{}';  -- ord of a job -> id of the job holding its key
    refused integer;
    rounds integer := 0;
    ordered boolean;
    waiting integer[] := '{}';  -- ords of the jobs that wait for an earlier job of their ordering key
BEGIN
    IF keyed IS NOT NULL THEN
        NULL;
    ELSIF cardinality(jobs) = 1 THEN  -- a plain expression, not a query: one enqueue() pays nothing for it
        keyed := CASE WHEN (jobs[1]).idempotency_key IS NULL THEN 0 ELSE 1 END;
    ELSE
        SELECT count(*) INTO keyed FROM unnest(jobs) AS i WHERE i.idempotency_key IS NOT NULL;
    END IF;
    WHILE keyed > 0 LOOP
        rounds := rounds + 1;
        INSERT INTO jobqueue.idempotency_keys AS k (producer, key, job_id, fingerprint, expires_at)
        SELECT coalesce(i.producer_id, ''), i.idempotency_key, i.id,
               jobqueue.job_fingerprint(i.job_type, i.queue, i.payload),
               greatest(now(), i.run_at) + coalesce(i.idempotency_window, s.idempotency_window, interval '24 hours')
        FROM unnest(todo) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = i.queue
        WHERE i.idempotency_key IS NOT NULL
        ORDER BY coalesce(i.producer_id, ''), i.idempotency_key, i.ord
        ON CONFLICT (producer, key) DO NOTHING;
        GET DIAGNOSTICS inserted = ROW_COUNT;
        EXIT WHEN inserted = keyed;

        SELECT held || coalesce(jsonb_object_agg(i.ord, h.job_id) FILTER (
                   WHERE h.job_id <> i.id AND h.expires_at > now()), '{}'),
               coalesce(array_agg(i ORDER BY i.ord) FILTER (
                   WHERE h.job_id IS NULL OR (h.job_id <> i.id AND h.expires_at <= now())), '{}'),
               min(i.ord) FILTER (
                   WHERE h.job_id <> i.id AND h.expires_at > now() AND i.idempotency_mismatch = 'reject'
                     AND h.fingerprint IS DISTINCT FROM jobqueue.job_fingerprint(i.job_type, i.queue, i.payload))
          INTO held, todo, refused
          FROM unnest(todo) AS i
          LEFT JOIN jobqueue.idempotency_keys h
            ON h.producer = coalesce(i.producer_id, '') AND h.key = i.idempotency_key
         WHERE i.idempotency_key IS NOT NULL;
        IF refused IS NOT NULL THEN
            PERFORM jobqueue.idempotency_mismatch(
                (SELECT i.idempotency_key FROM unnest(jobs) AS i WHERE i.ord = refused),
                (held->>refused::text)::uuid,
                CASE WHEN cardinality(jobs) > 1 THEN format('jobs[%s]', refused - 1) END);
        END IF;
        keyed := cardinality(todo);
        EXIT WHEN keyed = 0;
        IF rounds >= 5 THEN
            RAISE EXCEPTION USING ERRCODE = '40001',
                MESSAGE = 'jobqueue: idempotency keys kept changing hands during this enqueue; retry it';
        END IF;
        DELETE FROM jobqueue.idempotency_keys AS k
        USING unnest(todo) AS i
        WHERE k.producer = coalesce(i.producer_id, '') AND k.key = i.idempotency_key AND k.expires_at <= now();
    END LOOP;

    -- Ordering keys: a plain expression for one job, one pass over the array for many; a job
    -- without a key pays nothing more (waiting stays empty).
    IF cardinality(jobs) = 1 THEN
        ordered := (jobs[1]).ordering_key IS NOT NULL;
    ELSE
        ordered := EXISTS (SELECT FROM unnest(jobs) AS i WHERE i.ordering_key IS NOT NULL);
    END IF;
    IF ordered THEN
        waiting := jobqueue.ordering_waiters(jobs, held);
    END IF;

    WITH added AS (
        INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                        idempotency_key, producer_id, traceparent, timeout, expires_at,
                                        ordering_key, state)
        SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
               i.idempotency_key, i.producer_id, i.traceparent, i.timeout,
               coalesce(i.expires_at, i.run_at + s.job_ttl),
               i.ordering_key, CASE WHEN i.ord = ANY(waiting) THEN 'waiting' ELSE 'pending' END
        FROM unnest(jobs) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = i.queue
        WHERE i.idempotency_key IS NULL OR NOT held ? i.ord::text
        ORDER BY i.ord
        RETURNING j.id, j.queue, j.producer_id, j.seq
    )
    SELECT jobqueue.announce_new_jobs(array_agg(n.queue ORDER BY n.seq), array_agg(n.producer_id ORDER BY n.seq),
                                      array_agg(n.id ORDER BY n.seq))
    INTO inserted
    FROM added AS n
    HAVING count(*) > 0;

    IF held = '{}' THEN
        RETURN QUERY SELECT i.ord, i.id, true FROM unnest(jobs) AS i ORDER BY i.ord;
    ELSE
        -- Some jobs are answered with the id of the job holding their key: a row this node has,
        -- maybe alone. One WAL record written under a transaction id makes this transaction's
        -- commit write its commit record, flush it and wait for the synchronous standbys, as a
        -- first write's does, so the answer is never given before the holder is as durable as a
        -- new job would be. (A transaction id alone is not enough: a commit that wrote no WAL
        -- before its commit record neither flushes nor waits. A transactional logical message
        -- takes one and touches no table, no page and no lock; decoding plugins see it with the
        -- prefix jobqueue.repeat.)
        PERFORM pg_catalog.pg_logical_emit_message(true, 'jobqueue.repeat', '');
        RETURN QUERY
            SELECT i.ord, coalesce((held->>i.ord::text)::uuid, i.id), NOT held ? i.ord::text
            FROM unnest(jobs) AS i
            ORDER BY i.ord;
    END IF;
END $$;

CREATE FUNCTION jobqueue.enqueue_unchecked(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text, ordering_key text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch,
                                           producer_id, traceparent, payload);
    job_id uuid;
    wanted boolean;
    gated boolean;
    job jobqueue.job_input;
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid(problem[1], problem[2]);
    END IF;
    IF idempotency_key IS NOT NULL OR ordering_key IS NOT NULL THEN  -- the gates probed in the statement, as below
        problem := jobqueue.ordering_key_problem(ordering_key);
        IF problem IS NOT NULL THEN
            PERFORM jobqueue.invalid(problem[1], problem[2]);
        END IF;
        job := jobqueue.make_job_input(
            NULL, job_type, payload, priority, jobqueue.due_at(run_at), delay, queue, max_attempts, idempotency_key,
            producer_id, traceparent, timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch);
        job.ordering_key := enqueue_unchecked.ordering_key;
        SELECT r.id, EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now())
          INTO job_id, gated
          FROM jobqueue.insert_jobs(ARRAY[job]) AS r;
        IF gated THEN
            PERFORM jobqueue.refuse_gated_queues(ARRAY[queue], ARRAY[job_id]);
        END IF;
        RETURN job_id;
    END IF;
    -- Without a key, the common case: one statement resolves the defaults, inserts the job and
    -- reads what job_events_wanted() would say (each statement a plpgsql function runs costs), and
    -- whether a gate is closed anywhere (jobqueue.queue_gates, empty while nothing is full). Probing
    -- the gates after the insert, in this statement, costs nothing measurable; probing them for
    -- this queue before it cost a tenth of the call. A refusal raises, which undoes the insert.
    WITH added AS (
        INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts, producer_id,
                                        traceparent, timeout, expires_at)
        SELECT (i.job).id, (i.job).queue, (i.job).job_type, (i.job).payload, (i.job).priority, (i.job).run_at,
               (i.job).max_attempts, (i.job).producer_id, (i.job).traceparent, (i.job).timeout,
               coalesce((i.job).expires_at, (i.job).run_at + s.job_ttl)
        FROM (SELECT jobqueue.resolve_job(NULL, jobqueue.uuid_v7(), enqueue_unchecked.job_type, enqueue_unchecked.payload,
                                          enqueue_unchecked.priority, jobqueue.due_at(enqueue_unchecked.run_at), enqueue_unchecked.delay,
                                          enqueue_unchecked.queue, enqueue_unchecked.max_attempts, NULL, enqueue_unchecked.producer_id,
                                          enqueue_unchecked.traceparent, enqueue_unchecked.timeout, enqueue_unchecked.expires_at,
                                          enqueue_unchecked.expire_after, NULL, NULL, d.max_attempts) AS job
              FROM (SELECT) AS one
              LEFT JOIN jobqueue.task_defaults d ON d.job_type = enqueue_unchecked.job_type) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = enqueue_unchecked.queue
        RETURNING j.id
    )
    SELECT a.id, EXISTS (SELECT FROM jobqueue.event_listeners l WHERE l.expires_at > now()),
           EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now())
      INTO job_id, wanted, gated
      FROM added AS a;
    IF gated THEN  -- refused (and the insert undone), unless only new queues are and this one is known
        PERFORM jobqueue.refuse_gated_queues(ARRAY[queue], ARRAY[job_id]);
    END IF;
    PERFORM pg_notify('jobqueue_jobs', queue);
    IF wanted THEN
        PERFORM jobqueue.emit_job_events(ARRAY['job.queued'], ARRAY[queue], ARRAY[producer_id], ARRAY[job_id]);
    END IF;
    RETURN job_id;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
    found_job record;
BEGIN
    -- Another producer's job does not exist for a producer role.
    SELECT j.state, j.queue, j.job_type, j.producer_id INTO found_job FROM jobqueue.jobs j
     WHERE j.id = job_id AND (held IS NULL OR j.producer_id = held) FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF found_job.state IN ('pending', 'failed', 'waiting') THEN
        UPDATE jobqueue.jobs SET state = 'cancelled', finished_at = now(), updated_at = now()
         WHERE id = job_id;
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancelled', 'state', found_job.state, 'queue', found_job.queue, 'job_type', found_job.job_type,
            'producer_id', found_job.producer_id));
        RETURN 'cancelled';
    ELSIF found_job.state = 'processing' THEN
        UPDATE jobqueue.jobs SET cancel_requested = true, updated_at = now() WHERE id = job_id;
        PERFORM pg_notify('jobqueue_cancel', job_id::text);
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancel_requested', 'state', found_job.state, 'queue', found_job.queue,
            'job_type', found_job.job_type, 'producer_id', found_job.producer_id));
        RETURN 'cancel_requested';
    ELSIF found_job.state = 'cancelled' THEN
        RETURN 'cancelled_already';
    ELSE
        RETURN found_job.state;
    END IF;
END $$;
-- The entry points take ordering_key (last, so every call by name or position still works).
DROP FUNCTION jobqueue.enqueue(text, text, text, timestamptz, text, integer, text, interval, text, text, interval,
                               timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval,
                               timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.enqueue_unchecked(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                         interval, timestamptz, interval, interval, text);

CREATE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text, ordering_key text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN jobqueue.enqueue_unchecked(job_type, payload, priority, run_at, queue, max_attempts, idempotency_key, delay,
                                      jobqueue.acting_producer(producer_id), traceparent, timeout, expires_at,
                                      expire_after, idempotency_window, idempotency_mismatch, ordering_key);
END $$;

COMMENT ON FUNCTION jobqueue.enqueue(job_type text, payload jsonb, priority text, run_at timestamp with time zone, queue text, max_attempts integer, idempotency_key text, delay interval, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, ordering_key text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key). A producer role''s job is its own (producer_id defaults to it; another is refused). With an ordering_key it runs after every earlier job of that producer''s key has finished.';

CREATE FUNCTION jobqueue.enqueue(job_type text, payload text, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text, ordering_key text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    document jsonb;
BEGIN
    BEGIN
        document := payload::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        PERFORM jobqueue.invalid('payload', 'must be valid JSON');
    END;
    RETURN jobqueue.enqueue(job_type, document, priority, run_at, queue, max_attempts,
                            idempotency_key, delay, producer_id, traceparent, timeout, expires_at,
                            expire_after, idempotency_window, idempotency_mismatch, ordering_key);
END $$;

REVOKE EXECUTE ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                            interval, timestamptz, interval, interval, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                           interval, timestamptz, interval, interval, text, text)
    TO jobqueue_producer, jobqueue_worker, jobqueue_admin, jobqueue_api;
GRANT SELECT ON jobqueue.ordering_keys TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly;
