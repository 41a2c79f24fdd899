-- 0031_operator_guards undone: no served-names record, API keys without name or expiry.
DROP TRIGGER workers_record_served_names ON jobqueue.workers;
DROP FUNCTION jobqueue.record_served_names();
DROP TABLE jobqueue.served_names;
ALTER TABLE jobqueue.api_keys
    DROP CONSTRAINT api_keys_expiry_after_creation,
    DROP CONSTRAINT api_keys_name_length,
    DROP COLUMN expires_at,
    DROP COLUMN name;
