-- Undo of revision 0002_schedules.
ALTER TABLE jobqueue.workers DROP COLUMN heartbeat_interval;
DROP INDEX jobqueue.jobs_finished_idx;
DROP TABLE jobqueue.queue_retention;
DROP FUNCTION jobqueue.fire_schedule(bigint, timestamptz, text, text, timestamptz[], timestamptz, text);
DROP TABLE jobqueue.schedule_fires;
DROP TABLE jobqueue.schedules;
DROP FUNCTION jobqueue.schedules_before_write();
DROP FUNCTION jobqueue.cron_problem(text);
DROP FUNCTION jobqueue.timezone_problem(text);
