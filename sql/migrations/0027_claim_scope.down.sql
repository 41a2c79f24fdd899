-- 0027_claim_scope undone: one breaker per job type again (of several, the first by name is kept),
-- declarations without their app, and no type-ordered claim index.
ALTER TABLE jobqueue.job_limits DROP COLUMN declared_by;
COMMENT ON COLUMN jobqueue.job_limits.set_by IS 'code: declared in the app, rewritten at worker start; admin: set by an operator, kept until cleared.';
DELETE FROM jobqueue.circuit_job_types m
USING jobqueue.circuit_job_types first
WHERE first.job_type = m.job_type AND (first.circuit, first.declared_by) < (m.circuit, m.declared_by);
ALTER TABLE jobqueue.circuit_job_types DROP CONSTRAINT circuit_job_types_pkey;
ALTER TABLE jobqueue.circuit_job_types DROP COLUMN declared_by;
ALTER TABLE jobqueue.circuit_job_types ADD CONSTRAINT circuit_job_types_pkey PRIMARY KEY (job_type);
COMMENT ON TABLE jobqueue.circuit_job_types IS 'The circuit breaker each job type belongs to (@queue.task(circuit=...)), synced at worker start.';
ALTER TABLE jobqueue.circuits DROP COLUMN declared_by;
ALTER TABLE jobqueue.workers DROP COLUMN app;
DROP INDEX jobqueue.jobs_claim_type_idx;
