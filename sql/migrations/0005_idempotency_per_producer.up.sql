-- Idempotency keys are scoped by producer: one producer's key never answers another's submission.
--
-- With keys unique across producers, producer B submitting a key that producer A's live job held
-- got A's job id back and no job of its own — and could not even read that job. The REST API
-- serves many producers, so that was a silent loss. Keys are now unique per producer while the
-- job is live; jobs enqueued without a producer id (plain SQL) share one scope, as before.
-- (Downgrading fails while two producers' live jobs share a key.)
DROP INDEX jobqueue.jobs_idempotency_idx;
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobqueue.jobs ((coalesce(producer_id, '')), idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'processing', 'failed');

-- As in 0001, but the conflict target and the holder lookups include the producer.
CREATE OR REPLACE FUNCTION jobqueue.insert_jobs(jobs jobqueue.job_input[])
RETURNS TABLE (ord integer, id uuid, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    todo jobqueue.job_input[] := jobs;
    inserted uuid[] := '{}';
    rounds integer := 0;
BEGIN
    LOOP
        rounds := rounds + 1;
        WITH ins AS (
            INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                            idempotency_key, producer_id, traceparent)
            SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
                   i.idempotency_key, i.producer_id, i.traceparent
            FROM unnest(todo) AS i
            ORDER BY i.ord
            ON CONFLICT ((coalesce(producer_id, '')), idempotency_key)
                WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'processing', 'failed')
                DO NOTHING
            RETURNING j.id
        )
        SELECT inserted || coalesce(array_agg(ins.id), '{}') INTO inserted FROM ins;

        IF cardinality(inserted) = cardinality(jobs) THEN
            RETURN QUERY SELECT i.ord, i.id, true FROM unnest(jobs) AS i ORDER BY i.ord;
            RETURN;
        END IF;

        -- Keys already held: a fresh statement sees the live holder even when another producer
        -- committed it after this call began (same producer, same key). A holder that finished
        -- meanwhile frees its key, so those rows go round again.
        SELECT coalesce(array_agg(i ORDER BY i.ord), '{}') INTO todo
        FROM unnest(jobs) AS i
        WHERE NOT (i.id = ANY(inserted))
          AND NOT EXISTS (
              SELECT 1 FROM jobqueue.jobs j
              WHERE j.idempotency_key = i.idempotency_key
                AND coalesce(j.producer_id, '') = coalesce(i.producer_id, '')
                AND j.state IN ('pending', 'processing', 'failed'));
        IF cardinality(todo) = 0 OR rounds >= 5 THEN
            RETURN QUERY
                SELECT i.ord,
                       CASE WHEN i.id = ANY(inserted) THEN i.id ELSE holder.id END,
                       i.id = ANY(inserted)
                FROM unnest(jobs) AS i
                LEFT JOIN LATERAL (
                    SELECT j.id FROM jobqueue.jobs j
                    WHERE j.idempotency_key = i.idempotency_key
                      AND coalesce(j.producer_id, '') = coalesce(i.producer_id, '')
                      AND j.state IN ('pending', 'processing', 'failed')
                    ORDER BY j.seq
                    LIMIT 1
                ) holder ON NOT (i.id = ANY(inserted))
                ORDER BY i.ord;
            RETURN;
        END IF;
    END LOOP;
END $$;
