-- 0023_claim_scope: a worker claims only the job types it has handlers for, and another app's
-- jobs in front of its own cost its claims nothing (issue 17, §5).
-- jobs_claim_type_idx: the runnable jobs of each (queue, job type), in claim order. job_claim
-- reads the head of each (queue, level) in jobs_claim_idx; when it is not a type the worker may
-- take, it claims through this index, one probe per type it serves, instead of walking what lies in
-- front (50,000 jobs of a type nobody served ahead of the worker's own cost each claim 10 ms). It
-- also lists the job types waiting in a queue (one descent per type) for the unserved counts.
CREATE INDEX jobs_claim_type_idx ON jobqueue.jobs (queue, job_type, priority, run_at, seq)
    WHERE state IN ('pending', 'failed');
COMMENT ON INDEX jobqueue.jobs_claim_type_idx IS 'The runnable jobs of each (queue, job type) in claim order: claims by type past other apps'' jobs, and the job types waiting in a queue.';
