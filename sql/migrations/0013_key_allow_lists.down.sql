ALTER TABLE jobqueue.api_keys
    DROP CONSTRAINT api_keys_admin_unrestricted,
    DROP CONSTRAINT api_keys_allow_lists_not_empty,
    DROP COLUMN job_types,
    DROP COLUMN queues;
