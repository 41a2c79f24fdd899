-- Payload field-level encryption (issue 11): the dotted payload fields each task declared with
-- @queue.task(encrypted=[...]), written by workers at start beside max_attempts. Python clients
-- and the REST API read them (cached a few seconds) and encrypt those fields of every job of the
-- type; a SQL producer reads them to know what to encrypt itself.
ALTER TABLE jobqueue.task_defaults
    ADD COLUMN encrypted_fields text[] NOT NULL DEFAULT '{}';
COMMENT ON COLUMN jobqueue.task_defaults.encrypted_fields IS 'Dotted payload fields producers must encrypt for this job type (@queue.task(encrypted=...)); see README "Payload encryption".';
