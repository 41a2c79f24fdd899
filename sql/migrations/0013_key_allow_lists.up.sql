-- Per-key allow-lists (issue 11): a producer key may be limited to some queues and some job
-- types. NULL: any. A list is never empty (an empty list would be a key that can do nothing:
-- revoke it instead), and admin keys have none (they administer every queue).
ALTER TABLE jobqueue.api_keys
    ADD COLUMN queues text[],
    ADD COLUMN job_types text[],
    ADD CONSTRAINT api_keys_allow_lists_not_empty
        CHECK (coalesce(cardinality(queues), 1) > 0 AND coalesce(cardinality(job_types), 1) > 0),
    ADD CONSTRAINT api_keys_admin_unrestricted
        CHECK (role = 'producer' OR (queues IS NULL AND job_types IS NULL));
COMMENT ON COLUMN jobqueue.api_keys.queues IS 'The queues this producer key may submit to (NULL: any).';
COMMENT ON COLUMN jobqueue.api_keys.job_types IS 'The job types this producer key may submit (NULL: any).';
