-- Each app's declaration of a task, so that two apps with a task of the same name (sharing one
-- database) no longer overwrite each other's: the attempts stay those of the app that declared the
-- job type first while its workers live, as for breakers and limits (migration 0027), and the
-- encrypted fields producers seal are every app's together — a neighbour's worker start never makes
-- producers store in plain text a field another app's task encrypts.
CREATE TABLE jobqueue.task_declarations (
    job_type          text        NOT NULL,
    app               text        NOT NULL,
    encrypted_fields  text[]      NOT NULL DEFAULT '{}',
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_type, app)
);
COMMENT ON TABLE jobqueue.task_declarations IS 'Each app''s @queue.task(encrypted=...) per job type; task_defaults.encrypted_fields is their union.';

ALTER TABLE jobqueue.task_defaults ADD COLUMN declared_by text NOT NULL DEFAULT '';
COMMENT ON COLUMN jobqueue.task_defaults.declared_by IS 'The app (JobQueue name) whose max_attempts this is; '''' before migration 0036.';

-- What was declared before: its app is unknown (''), and its fields stay sealed until an app
-- declares the job type again.
INSERT INTO jobqueue.task_declarations (job_type, app, encrypted_fields)
SELECT job_type, '', encrypted_fields FROM jobqueue.task_defaults WHERE cardinality(encrypted_fields) > 0;

GRANT SELECT, INSERT, UPDATE, DELETE ON jobqueue.task_declarations TO jobqueue_worker;
GRANT SELECT ON jobqueue.task_declarations TO jobqueue_readonly, jobqueue_admin;
