-- The job types each worker serves, written when it registers: `GET /workers` and `jobqueue workers`
-- show them, so a queue shared by workers of different apps (a job type some worker of the queue
-- cannot run, which fails "no handler registered" and dead-letters) is visible before jobs fail.
ALTER TABLE jobqueue.workers ADD COLUMN job_types text[] NOT NULL DEFAULT '{}';

COMMENT ON COLUMN jobqueue.workers.job_types IS 'The job types this worker has handlers for (its app''s tasks), written at registration.';
