-- Global limits (issue 12): "at most N running at once" and "at most R starts per period", across
-- every worker on every host, per job type or per queue.
--
-- * job_limits: one row per limited job type (scope 'job_type', for that type in every queue) or
--   queue (scope 'queue', all its types together). Declared in code (@queue.task(concurrency=,
--   rate=), queue.queue_limit(...)) and written by workers when they start (set_by 'code'), or set by
--   an operator (set_by 'admin'), which a worker start never overwrites.
-- * recent_starts: the claim times (the claim transaction's now(), which is also each job's
--   started_at) of the last period's starts, ascending: a sliding log, so no window of
--   period_seconds ever holds more than rate starts (a fixed window would allow 2 x rate across
--   its edge).
-- * jobs.limited: set by a claim that took the job under a limit. The running count of a limit is
--   read from the jobs themselves (processing and limited), never kept as a counter, so every way
--   out of processing (ack, failure, cancel, deadline, release, a reclaimed lease, a deleted job)
--   gives the slot back with nothing to forget. The partial index holds only limited running jobs:
--   claims of unlimited jobs leave limited false and insert nothing into it.
-- * limit_allowances(queues): how many jobs of each limit that applies to those queues the calling
--   transaction may claim now. It locks each limit's row (SKIP LOCKED: a row another claimer holds
--   gives 0, so claimers never wait for each other and never spend the same slot), then counts in
--   a NEW statement, whose snapshot sees every claim committed by whoever held the row before —
--   one statement cannot: its snapshot is older than the lock it waited for.
-- * A change of job_limits NOTIFYs jobqueue_limits: workers learn at once that limits exist.
CREATE TABLE jobqueue.job_limits (
    scope          text             NOT NULL,
    name           text             NOT NULL,
    concurrency    integer,
    rate           integer,
    period_seconds double precision,
    set_by         text             NOT NULL DEFAULT 'code',
    recent_starts  timestamptz[]    NOT NULL DEFAULT '{}',
    updated_at     timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name),
    CONSTRAINT job_limits_scope_known CHECK (scope IN ('job_type', 'queue')),
    CONSTRAINT job_limits_name_present CHECK (length(name) > 0),
    CONSTRAINT job_limits_set_by_known CHECK (set_by IN ('code', 'admin')),
    CONSTRAINT job_limits_concurrency_positive CHECK (concurrency >= 1),
    CONSTRAINT job_limits_rate_range CHECK (rate BETWEEN 1 AND 10000),
    CONSTRAINT job_limits_period_positive CHECK (period_seconds > 0 AND period_seconds <= 86400),
    CONSTRAINT job_limits_rate_has_period CHECK ((rate IS NULL) = (period_seconds IS NULL)),
    CONSTRAINT job_limits_something CHECK (concurrency IS NOT NULL OR rate IS NOT NULL)
);
COMMENT ON TABLE jobqueue.job_limits IS 'Global limits enforced by the claim: at most concurrency jobs of the job type (or queue) processing at once, at most rate starts in any period_seconds.';
COMMENT ON COLUMN jobqueue.job_limits.recent_starts IS 'Claim times of the starts within the last period, ascending (the sliding window the rate is checked against).';
COMMENT ON COLUMN jobqueue.job_limits.set_by IS 'code: declared in the app, rewritten at worker start; admin: set by an operator, kept until cleared.';

ALTER TABLE jobqueue.jobs ADD COLUMN limited boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN jobqueue.jobs.limited IS 'Claimed under a limit of jobqueue.job_limits: while processing, it holds one of its slots.';
CREATE INDEX jobs_limited_running_idx ON jobqueue.jobs (job_type, queue) WHERE state = 'processing' AND limited;

CREATE FUNCTION jobqueue.limit_allowances(queues text[], at timestamptz DEFAULT NULL)
RETURNS TABLE (limit_scope text, limit_name text, allowance integer, free_in double precision)
LANGUAGE plpgsql AS $$
DECLARE
    held text[];
    t timestamptz := coalesce(at, now());
BEGIN
    SELECT coalesce(array_agg(l.scope || '/' || l.name), '{}') INTO held
    FROM (SELECT l.scope, l.name FROM jobqueue.job_limits l
          WHERE l.scope = 'job_type' OR (l.scope = 'queue' AND l.name = ANY(queues))
          ORDER BY l.scope, l.name
          FOR UPDATE SKIP LOCKED) AS l;
    -- A new statement: a new snapshot, taken after the locks above were granted.
    RETURN QUERY
    WITH running AS (
        SELECT j.job_type, j.queue, count(*)::integer AS n
        FROM jobqueue.jobs j
        WHERE j.state = 'processing' AND j.limited
        GROUP BY j.job_type, j.queue
    ), window_starts AS (
        SELECT l.scope, l.name, l.concurrency, l.rate,
               (SELECT coalesce(sum(r.n), 0)::integer FROM running r
                WHERE CASE l.scope WHEN 'job_type' THEN r.job_type ELSE r.queue END = l.name) AS busy,
               (SELECT count(*)::integer FROM unnest(l.recent_starts) AS s(ts)
                WHERE s.ts > t - make_interval(secs => l.period_seconds)) AS started,
               (SELECT min(s.ts) FROM unnest(l.recent_starts) AS s(ts)
                WHERE s.ts > t - make_interval(secs => l.period_seconds)) AS oldest,
               l.period_seconds,
               -- A claim whose transaction began before the last recorded start waits its turn:
               -- start times stay ascending, so trimming the log by time never drops one a
               -- later claim must still count.
               coalesce(l.recent_starts[cardinality(l.recent_starts)] > t, false) AS behind,
               l.scope || '/' || l.name = ANY(held) AS mine
        FROM jobqueue.job_limits l
        WHERE l.scope = 'job_type' OR (l.scope = 'queue' AND l.name = ANY(queues))
    )
    SELECT w.scope, w.name,
           CASE WHEN NOT w.mine OR w.behind THEN 0
                ELSE greatest(least(coalesce(w.concurrency - w.busy, 2147483647),
                                    coalesce(w.rate - w.started, 2147483647)), 0) END,
           CASE WHEN w.rate IS NOT NULL AND w.started >= w.rate
                THEN greatest(extract(epoch FROM w.oldest + make_interval(secs => w.period_seconds) - t), 0)::float8
           END
    FROM window_starts w
    ORDER BY w.scope, w.name;
END $$;
COMMENT ON FUNCTION jobqueue.limit_allowances(text[], timestamptz) IS 'For a claim of the given queues: how many jobs of each applicable limit this transaction may claim now (0 for a limit another claimer holds), and for a rate that is spent, in how many seconds it frees up.';

CREATE FUNCTION jobqueue.notify_job_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_limits', '');
    RETURN NULL;
END $$;

CREATE TRIGGER job_limits_notify AFTER INSERT OR DELETE OR UPDATE OF concurrency, rate, period_seconds
    ON jobqueue.job_limits FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.notify_job_limits();

-- Roles (0019): workers claim under the limits and publish the ones their app declares; admins and
-- the API set them; readers see them.
GRANT SELECT, INSERT, UPDATE, DELETE ON jobqueue.job_limits TO jobqueue_worker, jobqueue_admin, jobqueue_api;
GRANT SELECT ON jobqueue.job_limits TO jobqueue_readonly;
