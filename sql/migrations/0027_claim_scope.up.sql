-- 0027_claim_scope: a worker claims only the job types it has handlers for, and another app's
-- jobs in front of its own cost its claims nothing (issue 17, §5).
-- jobs_claim_type_idx: the runnable jobs of each (queue, job type), in claim order. job_claim
-- reads the head of each (queue, level) in jobs_claim_idx; when it is not a type the worker may
-- take, it claims through this index, one probe per type it serves, instead of walking what lies in
-- front (50,000 jobs of a type nobody served ahead of the worker's own cost each claim 10 ms). It
-- also lists the job types waiting in a queue (one descent per type) for the unserved counts.
CREATE INDEX jobs_claim_type_idx ON jobqueue.jobs (queue, job_type, priority, run_at, seq)
    WHERE state IN ('pending', 'failed');
COMMENT ON INDEX jobqueue.jobs_claim_type_idx IS 'The runnable jobs of each (queue, job type) in claim order: claims by type past other apps'' jobs, and the job types waiting in a queue.';

-- The breakers and limits an app declares are that app's (issue 17, §5): starting another app's
-- worker with a task of the same name took `charge` out of a circuit breaker and deleted a declared
-- `send_sms 100/m` limit, as each worker start rewrote what it knew for its job types. Each
-- declaration now records the app that made it (its JobQueue's name; '' for those stored before
-- this revision, unknown). A worker start writes its own app's declarations and removes only those
-- its app made and makes no more; another app's stay as that app made them while any of its
-- workers is alive (see circuit_sync and limit_sync). workers.app says which app a worker runs.
ALTER TABLE jobqueue.workers ADD COLUMN app text;
COMMENT ON COLUMN jobqueue.workers.app IS 'The app (its JobQueue''s name) whose tasks this worker runs, written at registration.';

ALTER TABLE jobqueue.circuits ADD COLUMN declared_by text NOT NULL DEFAULT '';
COMMENT ON COLUMN jobqueue.circuits.declared_by IS 'The app whose workers write this breaker''s settings (another app''s declaration of the same name does not change them while a worker of this one is alive); '''' : declared before 0027.';

-- A job type may belong to breakers of several apps (of the same name or not): it is blocked while
-- any of them is not closed. One row per (job type, breaker, declaring app).
ALTER TABLE jobqueue.circuit_job_types ADD COLUMN declared_by text NOT NULL DEFAULT '';
ALTER TABLE jobqueue.circuit_job_types DROP CONSTRAINT circuit_job_types_pkey;
ALTER TABLE jobqueue.circuit_job_types ADD CONSTRAINT circuit_job_types_pkey PRIMARY KEY (job_type, circuit, declared_by);
COMMENT ON TABLE jobqueue.circuit_job_types IS 'The circuit breakers each job type belongs to, by the app that declared it (@queue.task(circuit=...)), synced at worker start: the type is blocked while any of them is not closed.';

ALTER TABLE jobqueue.job_limits ADD COLUMN declared_by text NOT NULL DEFAULT '';
COMMENT ON COLUMN jobqueue.job_limits.declared_by IS 'set_by code: the app that declared it, the only one whose worker starts redefine or remove it while a worker of it is alive; '''' : declared before 0027.';
COMMENT ON COLUMN jobqueue.job_limits.set_by IS 'code: declared in an app (declared_by), rewritten when a worker of that app starts; admin: set by an operator, kept until cleared.';
