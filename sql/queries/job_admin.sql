-- Operator queries on jobqueue.jobs (jobqueue.store.job_admin): listing, deleting a job that never
-- ran, what each worker runs, dead-letter retry and purge, bulk cancel, key rotation's scan and write.
-- Those that act record what they did in the audit log (jobqueue.audit(), migration 0032), in their
-- statement.

-- name: job_delete_waiting
-- Admin delete of one job that has not started: pending (due or scheduled) or waiting for its
-- ordering key, with no attempt yet (a pending head's delete releases its key's next job).
-- It goes as if it had never been submitted, with the idempotency key it holds (a repeat makes a
-- new job). A job that ran an attempt, runs now or finished is kept with its history (outcome
-- started, with its state). FOR UPDATE first: a worker's claim (SKIP LOCKED) passes over the row
-- while it is decided, and a job claimed just before is seen as processing. A delete is recorded
-- in the audit log (job.delete).
WITH target AS (
    SELECT j.id, j.state, j.attempts FROM jobqueue.jobs j WHERE j.id = %(id)s FOR UPDATE
), gone AS (
    DELETE FROM jobqueue.jobs j USING target t
    WHERE j.id = t.id AND t.state IN ('pending', 'waiting') AND t.attempts = 0
    RETURNING j.id, j.producer_id, j.idempotency_key, j.queue, j.job_type
), keys AS (
    DELETE FROM jobqueue.idempotency_keys k USING gone g
    WHERE k.producer = coalesce(g.producer_id, '') AND k.key = g.idempotency_key AND k.job_id = g.id
), recorded AS (
    SELECT jobqueue.audit('job.delete', g.id::text, jsonb_build_object(
               'queue', g.queue, 'job_type', g.job_type, 'producer_id', g.producer_id)) AS entry
    FROM gone g
)
SELECT CASE WHEN (SELECT count(*) FROM recorded) > 0 THEN 'deleted'
            WHEN NOT EXISTS (SELECT 1 FROM target) THEN 'not_found'
            ELSE 'started' END AS outcome,
       (SELECT state FROM target) AS state;

-- name: job_list
-- Newest first, with bounded work per page whatever the filters: job ids are time-ordered
-- (UUIDv7), so this walks jobs_pkey backwards from %(before)s (the cursor: the last id the
-- previous page examined; NULL: from the newest) and examines at most %(scan)s rows. Of those it
-- returns the ones matching the filters, at most %(limit)s, each with its last attempt's error.
-- When the budget runs out before the page fills, the last row examined comes too with matches
-- false unless it matched: its id is where the next page starts (examined = %(scan)s). The
-- cursor is never NULL in the index condition (the generic plan of a prepared statement could
-- not use an "IS NULL OR" there, and would walk from the newest row on every page).
-- %(scheduled)s true: only jobs whose run_at is still ahead; false: only those due.
-- job_list_in_state is the same page for a state that has its own index.
SELECT e.id, e.queue, e.job_type, e.priority, e.state, e.attempts, e.max_attempts, e.run_at,
       e.created_at, e.updated_at, e.finished_at, e.producer_id, e.seq, x.error_type, x.message,
       e.dead_reason, e.matches, e.examined
FROM (
    SELECT w.*, row_number() OVER (ORDER BY w.id DESC) AS examined,
           ((%(state)s::text IS NULL OR w.state = %(state)s::text)
            AND (%(queue)s::text IS NULL OR w.queue = %(queue)s::text)
            AND (%(job_type)s::text IS NULL OR w.job_type = %(job_type)s::text)
            AND (%(priority)s::smallint IS NULL OR w.priority = %(priority)s::smallint)
            AND (%(producer_id)s::text IS NULL OR w.producer_id = %(producer_id)s::text)
            AND (%(scheduled)s::boolean IS NULL OR (w.run_at > now()) = %(scheduled)s::boolean)) AS matches
    FROM (SELECT j.id, j.queue, j.job_type, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
                 j.created_at, j.updated_at, j.finished_at, j.producer_id, j.seq, j.dead_reason
          FROM jobqueue.jobs j
          WHERE j.id < coalesce(%(before)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
          ORDER BY j.id DESC
          LIMIT %(scan)s) AS w
) AS e
LEFT JOIN LATERAL (
    SELECT r.error_type, r.message FROM jobqueue.job_errors r
    WHERE e.matches AND r.job_id = e.id ORDER BY r.attempt DESC LIMIT 1
) x ON true
WHERE e.matches OR e.examined = %(scan)s
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: job_list_in_state
-- job_list for %(state)s one of failed, dead_letter, cancelled (a job completing on its first
-- attempt is never in them): the walk is of jobs_state_listing_idx, so the rows examined are
-- only that state's, and the dead-letter queue pages fill however many jobs have completed. The
-- state comes through a sub-select so that no plan can prove jobs_finished_idx's predicate from
-- it: that index holds dead and cancelled jobs too, in finished_at order, and a plan reading all
-- of a state's rows from it and sorting them is what the planner picks when they are few.
SELECT e.id, e.queue, e.job_type, e.priority, e.state, e.attempts, e.max_attempts, e.run_at,
       e.created_at, e.updated_at, e.finished_at, e.producer_id, e.seq, x.error_type, x.message,
       e.dead_reason, e.matches, e.examined
FROM (
    SELECT w.*, row_number() OVER (ORDER BY w.id DESC) AS examined,
           ((%(queue)s::text IS NULL OR w.queue = %(queue)s::text)
            AND (%(job_type)s::text IS NULL OR w.job_type = %(job_type)s::text)
            AND (%(priority)s::smallint IS NULL OR w.priority = %(priority)s::smallint)
            AND (%(producer_id)s::text IS NULL OR w.producer_id = %(producer_id)s::text)
            AND (%(scheduled)s::boolean IS NULL OR (w.run_at > now()) = %(scheduled)s::boolean)) AS matches
    FROM (SELECT j.id, j.queue, j.job_type, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
                 j.created_at, j.updated_at, j.finished_at, j.producer_id, j.seq, j.dead_reason
          FROM jobqueue.jobs j
          WHERE j.state IN ('failed', 'dead_letter', 'cancelled') AND j.state = (SELECT %(state)s::text)
            AND j.id < coalesce(%(before)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
          ORDER BY j.id DESC
          LIMIT %(scan)s) AS w
) AS e
LEFT JOIN LATERAL (
    SELECT r.error_type, r.message FROM jobqueue.job_errors r
    WHERE e.matches AND r.job_id = e.id ORDER BY r.attempt DESC LIMIT 1
) x ON true
WHERE e.matches OR e.examined = %(scan)s
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: job_running_by_worker
-- What each worker runs now: its processing jobs, oldest first, at most %(per_worker)s each, with
-- how many it runs in all. A walk of jobs_lease_idx (only held jobs have locked_until).
SELECT r.locked_by, r.running, r.id, r.queue, r.job_type, r.attempts, r.started_at
FROM (SELECT j.locked_by, j.id, j.queue, j.job_type, j.attempts, j.started_at,
             row_number() OVER (PARTITION BY j.locked_by ORDER BY j.started_at, j.id) AS n,
             count(*) OVER (PARTITION BY j.locked_by) AS running
      FROM jobqueue.jobs j
      WHERE j.locked_until IS NOT NULL AND j.state = 'processing' AND j.locked_by IS NOT NULL) r
WHERE r.n <= %(per_worker)s
ORDER BY r.locked_by, r.n;

-- name: job_retry_dead
-- Admin retry of one dead job: back to pending now with one more attempt allowed (max_attempts
-- raised only if exhausted, as River's JobRetry and Oban's retry_job do); its final error result
-- is removed so the next completion can store its result, the attempt errors are kept. A job
-- whose idempotency key another job of its producer now holds (submitted after this one's window
-- closed, its own window still open) stays dead (outcome idempotency_key_taken). A retry does not
-- renew the job's own window: it counts from the submission. A retry is recorded in the audit
-- log (dlq.retry).
WITH target AS (
    SELECT j.id, j.state, j.idempotency_key, j.producer_id FROM jobqueue.jobs j WHERE j.id = %(id)s FOR UPDATE
), retried AS (
    UPDATE jobqueue.jobs AS j
    SET state = 'pending', run_at = now(), max_attempts = greatest(j.max_attempts, j.attempts + 1),
        finished_at = NULL, dead_reason = NULL, expires_at = NULL, cancel_requested = false, locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND t.state = 'dead_letter'
      AND NOT EXISTS (SELECT 1 FROM jobqueue.idempotency_keys k
                      WHERE k.producer = coalesce(t.producer_id, '') AND k.key = t.idempotency_key
                        AND k.job_id <> t.id AND k.expires_at > now())
    RETURNING j.id, j.queue, j.job_type, j.producer_id
), cleared AS (
    DELETE FROM jobqueue.job_results r USING retried x WHERE r.job_id = x.id
), woken AS (
    SELECT pg_notify('jobqueue_jobs', r.queue),
           jobqueue.audit('dlq.retry', r.id::text, jsonb_build_object(
               'queue', r.queue, 'job_type', r.job_type, 'producer_id', r.producer_id)) AS entry
    FROM retried r
)
SELECT CASE WHEN (SELECT count(*) FROM woken) > 0 THEN 'retried'
            WHEN NOT EXISTS (SELECT 1 FROM target) THEN 'not_found'
            WHEN (SELECT state FROM target) = 'dead_letter' THEN 'idempotency_key_taken'
            ELSE 'not_dead' END AS outcome;

-- name: job_retry_dead_batch
-- Bulk retry, one batch: the next %(limit)s dead jobs after seq %(after)s matching the filters,
-- as job_retry_dead does one. Jobs whose idempotency key another job holds stay dead; the caller
-- pages on with the returned last seq. The first batch (after 0) records the whole retry in the
-- audit log (dlq.retry_all, with the filters and how many dead jobs matched them as it began), in
-- its own transaction: no batch changes a job before that entry is committed.
WITH recorded AS (
    SELECT jobqueue.audit('dlq.retry_all', NULL, jsonb_build_object(
               'queue', %(queue)s::text, 'job_type', %(job_type)s::text,
               'matching', (SELECT count(*) FROM jobqueue.jobs j
                            WHERE j.state = 'dead_letter'
                              AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
                              AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)))) AS entry
    WHERE %(after)s::bigint = 0
), batch AS (
    SELECT j.id, j.seq, j.idempotency_key, j.producer_id FROM jobqueue.jobs j
    WHERE j.state = 'dead_letter' AND j.seq > %(after)s::bigint
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
    ORDER BY j.seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), eligible AS (
    SELECT b.id FROM batch b
    WHERE NOT EXISTS (SELECT 1 FROM jobqueue.idempotency_keys k
                      WHERE k.producer = coalesce(b.producer_id, '') AND k.key = b.idempotency_key
                        AND k.job_id <> b.id AND k.expires_at > now())
), retried AS (
    UPDATE jobqueue.jobs AS j
    SET state = 'pending', run_at = now(), max_attempts = greatest(j.max_attempts, j.attempts + 1),
        finished_at = NULL, dead_reason = NULL, expires_at = NULL, cancel_requested = false, locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM eligible e
    WHERE j.id = e.id
    RETURNING j.id, j.queue
), cleared AS (
    DELETE FROM jobqueue.job_results r USING retried x WHERE r.job_id = x.id
), woken AS (
    SELECT pg_notify('jobqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM retried) AS q
)
SELECT (SELECT count(*) FROM retried) AS retried, (SELECT count(*) FROM batch) AS scanned,
       (SELECT max(seq) FROM batch) AS last_seq, (SELECT count(*) FROM woken) AS notified,
       (SELECT count(*) FROM recorded) AS recorded;

-- name: job_purge_dead_batch
-- Purge, one batch: deletes the next %(limit)s dead jobs after seq %(after)s matching the
-- filters (died before %(before)s when given), with their results, attempt errors and the
-- idempotency keys they hold (a purged job's key is free: a repeat makes a new job). The first
-- batch records the purge in the audit log (dlq.purge), as job_retry_dead_batch does its retry.
WITH recorded AS (
    SELECT jobqueue.audit('dlq.purge', NULL, jsonb_build_object(
               'queue', %(queue)s::text, 'job_type', %(job_type)s::text, 'before', %(before)s::timestamptz,
               'matching', (SELECT count(*) FROM jobqueue.jobs j
                            WHERE j.state = 'dead_letter'
                              AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
                              AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
                              AND (%(before)s::timestamptz IS NULL OR j.finished_at < %(before)s::timestamptz)))) AS entry
    WHERE %(after)s::bigint = 0
), batch AS (
    SELECT j.id, j.seq FROM jobqueue.jobs j
    WHERE j.state = 'dead_letter' AND j.seq > %(after)s::bigint
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(before)s::timestamptz IS NULL OR j.finished_at < %(before)s::timestamptz)
    ORDER BY j.seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobqueue.jobs j USING batch b WHERE j.id = b.id RETURNING j.id, j.producer_id, j.idempotency_key
), results AS (
    DELETE FROM jobqueue.job_results r USING gone g WHERE r.job_id = g.id
), errors AS (
    DELETE FROM jobqueue.job_errors e USING gone g WHERE e.job_id = g.id
), keys AS (
    DELETE FROM jobqueue.idempotency_keys k USING gone g
    WHERE k.producer = coalesce(g.producer_id, '') AND k.key = g.idempotency_key AND k.job_id = g.id
)
SELECT (SELECT count(*) FROM gone) AS purged, (SELECT count(*) FROM batch) AS scanned,
       (SELECT max(seq) FROM batch) AS last_seq, (SELECT count(*) FROM recorded) AS recorded;

-- name: job_cancel_batch
-- Bulk cancel, one batch. Waiting jobs (pending, scheduled, or failed and waiting for a retry)
-- matching the filters are walked in jobs_claim_idx order from the key after_queue, … (the last
-- batch's last key; '', -1, -infinity, -1 at the start), %(limit)s at a time, and become
-- cancelled; so do at most %(limit)s jobs held back behind their ordering key (state waiting:
-- only keyed jobs are, walked through jobs_ordering_idx), and at most %(limit)s running ones get a
-- cancel request (as jobqueue.cancel does one: the flag, and a jobqueue_cancel NOTIFY for the
-- worker). Held-back and running jobs leave their set once done, so they need no cursor (running
-- ones are walked through jobs_lease_idx: only held jobs are in it). Only jobs created before
-- %(cutoff)s, capped at now: jobs enqueued while the cancel runs are not chased.
-- Each statement locks at most 3 x %(limit)s rows, SKIP LOCKED: a job a claim, an ack or an
-- operator's transaction holds this instant is skipped, never waited for (so this never deadlocks
-- with them), and reported (skipped), for the caller's next pass. Bounded by the live jobs, never
-- by the table: each scan walks a partial index in its own order, from a cursor, so no plan reads
-- finished jobs (a first version, without, ended on a sequential scan: 0.7 s on 1.1M rows), and
-- no batch walks again the index entries earlier batches left behind.
-- A head of an ordering key cancelled here releases its key's next job (the 0035 trigger, at the
-- end of the statement: after the held-back jobs this batch cancels): "keyed" tells the caller
-- that a job it matched may have turned pending behind its cursor, for another pass.
-- The first batch (%(first)s) records the whole cancel in the audit log (job.cancel_all, with its
-- filters; not how many matched: counting them would read every live job in one statement).
-- Returns: cancelled, requested, cutoff, ahead (the walk has more), skipped, more_left (held-back
-- or running jobs still to do), keyed, and the last key walked.
WITH recorded AS (
    SELECT jobqueue.audit('job.cancel_all', NULL, jsonb_build_object(
               'queue', %(queue)s::text, 'job_type', %(job_type)s::text, 'state', %(state)s::text,
               'before', %(cutoff)s::timestamptz, 'producer_id', %(producer_id)s::text)) AS entry
    WHERE %(first)s::boolean
), candidates AS (
    SELECT j.id, j.queue, j.priority, j.run_at, j.seq, j.ordering_key FROM jobqueue.jobs j
    WHERE j.state IN ('pending', 'failed')
      AND (j.queue, j.priority, j.run_at, j.seq)
          > (%(after_queue)s::text, %(after_priority)s::smallint, %(after_run_at)s::timestamptz, %(after_seq)s::bigint)
      AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)
      AND j.created_at < least(coalesce(%(cutoff)s::timestamptz, now()), now())
    ORDER BY j.queue, j.priority, j.run_at, j.seq
    LIMIT %(limit)s
), waiting AS (
    SELECT j.id FROM jobqueue.jobs j
    WHERE j.id IN (SELECT c.id FROM candidates c) AND j.state IN ('pending', 'failed')
      AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
    FOR UPDATE OF j SKIP LOCKED
), held AS (
    SELECT j.id FROM jobqueue.jobs j
    WHERE j.ordering_key IS NOT NULL AND j.state = 'waiting'
      AND coalesce(%(state)s::text, 'waiting') = 'waiting'
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)
      AND j.created_at < least(coalesce(%(cutoff)s::timestamptz, now()), now())
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), running AS (
    SELECT j.id FROM jobqueue.jobs j
    WHERE j.locked_until IS NOT NULL AND j.state = 'processing' AND NOT j.cancel_requested
      AND coalesce(%(state)s::text, 'processing') = 'processing'
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)
      AND j.created_at < least(coalesce(%(cutoff)s::timestamptz, now()), now())
    ORDER BY j.locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE jobqueue.jobs j SET state = 'cancelled', finished_at = now(), updated_at = now()
    FROM (SELECT id FROM waiting UNION ALL SELECT id FROM held) w WHERE j.id = w.id
    RETURNING j.id
), requested AS (
    UPDATE jobqueue.jobs j SET cancel_requested = true, updated_at = now()
    FROM running r WHERE j.id = r.id
    RETURNING j.id
), told AS (
    SELECT pg_notify('jobqueue_cancel', r.id::text) FROM requested r
), left_over AS (
    SELECT 1 FROM jobqueue.jobs j
    WHERE j.locked_until IS NOT NULL AND j.state = 'processing' AND NOT j.cancel_requested
      AND coalesce(%(state)s::text, 'processing') = 'processing'
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)
      AND j.created_at < least(coalesce(%(cutoff)s::timestamptz, now()), now())
      AND j.id NOT IN (SELECT id FROM running)
    UNION ALL
    SELECT 1 FROM jobqueue.jobs j
    WHERE j.ordering_key IS NOT NULL AND j.state = 'waiting'
      AND coalesce(%(state)s::text, 'waiting') = 'waiting'
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
      AND (%(producer_id)s::text IS NULL OR j.producer_id = %(producer_id)s::text)
      AND j.created_at < least(coalesce(%(cutoff)s::timestamptz, now()), now())
      AND j.id NOT IN (SELECT id FROM held)
    LIMIT 1
), last AS (
    SELECT c.queue, c.priority, c.run_at, c.seq FROM candidates c
    ORDER BY c.queue DESC, c.priority DESC, c.run_at DESC, c.seq DESC
    LIMIT 1
)
SELECT (SELECT count(*) FROM cancelled) AS cancelled, (SELECT count(*) FROM requested) AS requested,
       least(coalesce(%(cutoff)s::timestamptz, now()), now()) AS cutoff,
       (SELECT count(*) FROM candidates) = %(limit)s AS ahead,
       (SELECT count(*) FROM waiting) < (SELECT count(*) FROM candidates) AS skipped,
       EXISTS (SELECT FROM left_over) AS more_left,
       EXISTS (SELECT FROM candidates c WHERE c.ordering_key IS NOT NULL AND c.id IN (SELECT id FROM waiting)) AS keyed,
       (SELECT queue FROM last), (SELECT priority FROM last), (SELECT run_at FROM last), (SELECT seq FROM last),
       (SELECT count(*) FROM told) AS notified, (SELECT count(*) FROM recorded) AS recorded;

-- name: job_rewrap_scan
-- Key rotation, one batch: the next %(limit)s jobs after seq %(after)s in every state, and of them
-- those whose payload or stored result holds an encrypted value (jobqueue.crypto.envelopes) of the kind
-- %(holding)s names: 'stale' (under a key other than %(kid)s, or of the unbound format 1), 'any',
-- or 'unbound' (format 1 only). Returns (scanned, last seq, rows in seq order), each row
-- [seq, id, producer_id, job_type, state, payload, result, error type of the last attempt of a
-- dead-lettered job].
WITH batch AS (
    SELECT j.seq, j.id, j.producer_id, j.job_type, j.state, j.payload FROM jobqueue.jobs j
    WHERE j.seq > %(after)s::bigint
    ORDER BY j.seq
    LIMIT %(limit)s
), found AS (
    SELECT b.seq, b.id, b.producer_id, b.job_type, b.state, b.payload, r.result
    FROM batch b LEFT JOIN jobqueue.job_results r ON r.job_id = b.id
    WHERE CASE %(holding)s::text
        WHEN 'any' THEN jsonb_path_exists(b.payload, '$.** ? (exists(@."$jobqueue_enc"))')
                        OR jsonb_path_exists(r.result, '$.** ? (exists(@."$jobqueue_enc"))')
        WHEN 'unbound' THEN jsonb_path_exists(b.payload, '$.** ? (@."$jobqueue_enc" == 1)')
                            OR jsonb_path_exists(r.result, '$.** ? (@."$jobqueue_enc" == 1)')
        ELSE jsonb_path_exists(b.payload, '$.** ? (exists(@."$jobqueue_enc") && (@.kid != $kid || @."$jobqueue_enc" == 1))',
                               jsonb_build_object('kid', %(kid)s::text))
             OR jsonb_path_exists(r.result, '$.** ? (exists(@."$jobqueue_enc") && (@.kid != $kid || @."$jobqueue_enc" == 1))',
                                  jsonb_build_object('kid', %(kid)s::text))
    END
)
SELECT (SELECT count(*) FROM batch) AS scanned, (SELECT max(seq) FROM batch) AS last_seq,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(
                   f.seq, f.id, f.producer_id, f.job_type, f.state, f.payload, f.result,
                   CASE WHEN f.state = 'dead_letter' THEN (SELECT e.error_type FROM jobqueue.job_errors e
                                                          WHERE e.job_id = f.id ORDER BY e.attempt DESC LIMIT 1) END)
                   ORDER BY f.seq), '[]')
        FROM found f) AS found;

-- name: job_rewrap_write
-- Key rotation: store re-wrapped (or newly bound) payloads and results, each only if it is still
-- the value that was read (compare-and-set: nothing read earlier is ever written back over a newer
-- value). Returns the ids of the jobs whose payload it wrote, and how many results.
WITH payloads AS (
    UPDATE jobqueue.jobs j SET payload = w.new
    FROM unnest(%(payload_ids)s::uuid[], %(old_payloads)s::jsonb[], %(new_payloads)s::jsonb[]) AS w(id, old, new)
    WHERE j.id = w.id AND j.payload = w.old
    RETURNING j.id
), results AS (
    UPDATE jobqueue.job_results r SET result = w.new
    FROM unnest(%(result_ids)s::uuid[], %(old_results)s::jsonb[], %(new_results)s::jsonb[]) AS w(id, old, new)
    WHERE r.job_id = w.id AND r.result = w.old
    RETURNING r.job_id
)
SELECT (SELECT coalesce(array_agg(id), '{}') FROM payloads) AS payloads, (SELECT count(*) FROM results) AS results;

-- name: job_session_producer
-- The producer this session's login is held to (NULL: it may enqueue for any): the producer_id
-- its jobs' rows will carry, which a producer that seals fields binds them to (jobqueue.crypto.envelopes).
SELECT jobqueue.session_producer();

-- name: job_waiting_queues
-- The test mode's drain of every queue (jobqueue.testing): the queues holding waiting jobs
-- (pending or failed, due or not) of the job types it runs. Never run by a worker.
SELECT DISTINCT j.queue
FROM jobqueue.jobs j
WHERE j.state IN ('pending', 'failed') AND j.job_type = ANY(%(served)s::text[])
ORDER BY j.queue;

-- name: job_bring_forward
-- The test mode's drain with_scheduled (jobqueue.testing): nothing of %(served)s is due in
-- %(queues)s, so the waiting ones due soonest — scheduled jobs, and retries waiting out their
-- backoff — are due now: those whose run_at is the earliest still ahead, all at once (several due
-- at that moment keep their submission order), so they run in the order they were due in. Their
-- ids. Never run by a worker.
WITH next AS (
    SELECT min(j.run_at) AS at
    FROM jobqueue.jobs j
    WHERE j.state IN ('pending', 'failed') AND j.queue = ANY(%(queues)s::text[])
      AND j.job_type = ANY(%(served)s::text[]) AND j.run_at > now()
)
UPDATE jobqueue.jobs AS j
SET run_at = now(), updated_at = now()
FROM next
WHERE j.state IN ('pending', 'failed') AND j.queue = ANY(%(queues)s::text[])
  AND j.job_type = ANY(%(served)s::text[]) AND j.run_at = next.at
RETURNING j.id;
