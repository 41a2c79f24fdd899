DROP TABLE jobqueue.task_declarations;
ALTER TABLE jobqueue.task_defaults DROP COLUMN declared_by;
