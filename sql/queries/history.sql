-- The dashboard's throughput history (jobqueue.throughput_history): one row per minute.

-- name: history_record
-- The running totals now (the jobs.seq sequence, the workers' summed counters), upserted into
-- this minute's row. A later sample of the same minute replaces an earlier one; an older one (a
-- leader that lost its lease and has not noticed) never overwrites a newer one.
INSERT INTO jobqueue.throughput_history AS h (minute, measured_at, submitted, processed, failed)
SELECT date_trunc('minute', n.at), n.at,
       coalesce(pg_sequence_last_value(pg_get_serial_sequence('jobqueue.jobs', 'seq')::regclass), 0),
       coalesce((SELECT sum(s.processed) FROM jobqueue.worker_stats s), 0),
       coalesce((SELECT sum(s.failed) FROM jobqueue.worker_stats s), 0)
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS at) n
ON CONFLICT (minute) DO UPDATE
SET measured_at = EXCLUDED.measured_at, submitted = EXCLUDED.submitted, processed = EXCLUDED.processed,
    failed = EXCLUDED.failed
WHERE EXCLUDED.measured_at > h.measured_at
RETURNING h.minute;

-- name: history_prune
-- Rows older than %(keep_seconds)s go (the table holds a day: 1,440 rows).
DELETE FROM jobqueue.throughput_history
WHERE minute < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_seconds)s)
RETURNING minute;

-- name: history_rates
-- The last %(minutes)s minutes as rates per second: each row against the row before it (the row
-- just before the window is read for the first one's baseline), divided by the seconds between
-- their samples. Totals that went down (a worker's counters lost before they were flushed) count
-- as zero, not as negative throughput.
SELECT d.minute, d.measured_at,
       greatest(d.submitted - d.prev_submitted, 0) / d.seconds AS submitted_per_s,
       greatest(d.completed - d.prev_completed, 0) / d.seconds AS completed_per_s,
       greatest(d.failed - d.prev_failed, 0) / d.seconds AS failed_per_s
FROM (
    SELECT h.minute, h.measured_at, h.submitted, h.processed - h.failed AS completed, h.failed,
           lag(h.submitted) OVER w AS prev_submitted, lag(h.processed - h.failed) OVER w AS prev_completed,
           lag(h.failed) OVER w AS prev_failed,
           nullif(extract(epoch FROM h.measured_at - lag(h.measured_at) OVER w), 0)::float8 AS seconds
    FROM jobqueue.throughput_history h
    WHERE h.minute >= date_trunc('minute', coalesce(%(now)s::timestamptz, now())) - make_interval(mins => %(minutes)s + 1)
    WINDOW w AS (ORDER BY h.minute)
) d
WHERE d.minute >= date_trunc('minute', coalesce(%(now)s::timestamptz, now())) - make_interval(mins => %(minutes)s)
  AND d.seconds IS NOT NULL
ORDER BY d.minute;
