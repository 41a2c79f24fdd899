ALTER TABLE jobqueue.workers DROP COLUMN job_types;
