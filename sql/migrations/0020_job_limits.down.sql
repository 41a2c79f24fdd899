DROP TABLE jobqueue.job_limits;
DROP FUNCTION jobqueue.limit_allowances(text[], timestamptz);
DROP FUNCTION jobqueue.notify_job_limits();
DROP INDEX jobqueue.jobs_limited_running_idx;
ALTER TABLE jobqueue.jobs DROP COLUMN limited;
