-- 0029: an answer from a held idempotency key is as durable as a first write. A repeat wrote
-- nothing, so it took no transaction id and its commit neither flushed nor waited for a
-- synchronous standby: it answered at once with an id whose row could exist on this node alone
-- (a first submission whose wait for the standby was cut short), and a failover lost that job.
-- insert_jobs restated from 0009 with one statement added where held keys are answered.
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

    WITH added AS (
        INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                        idempotency_key, producer_id, traceparent, timeout, expires_at)
        SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
               i.idempotency_key, i.producer_id, i.traceparent, i.timeout,
               coalesce(i.expires_at, i.run_at + s.job_ttl)
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
