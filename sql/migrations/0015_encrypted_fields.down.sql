ALTER TABLE jobqueue.task_defaults DROP COLUMN encrypted_fields;
