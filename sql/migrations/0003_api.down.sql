-- Undo of revision 0003_api.
DROP TRIGGER IF EXISTS jobs_events_update ON jobqueue.jobs;
DROP TRIGGER IF EXISTS jobs_events_insert ON jobqueue.jobs;
DROP FUNCTION IF EXISTS jobqueue.job_events_on_update();
DROP FUNCTION IF EXISTS jobqueue.job_events_on_insert();
DROP FUNCTION IF EXISTS jobqueue.emit_job_events(text[], text[], text[], uuid[]);
DROP FUNCTION IF EXISTS jobqueue.job_events_wanted();
DROP TABLE IF EXISTS jobqueue.event_listeners;
DROP INDEX IF EXISTS jobqueue.jobs_list_idx;
DROP TABLE IF EXISTS jobqueue.queue_settings;
DROP FUNCTION IF EXISTS jobqueue.notify_queue_settings();
DROP TABLE IF EXISTS jobqueue.api_keys;
