-- Queries of jobqueue.encryption_keys: the key ids `jobqueue keys rotate` has held (jobqueue.cli.keys).

-- name: encryption_key_record
-- Records the ids of the key ring a rotation runs with (those not recorded yet), and returns
-- every id ever recorded, these included. Each rotation starts here, and is recorded in the audit
-- log as it starts (keys.rotate; target: the current key's id, the ring's first).
WITH added AS (
    INSERT INTO jobqueue.encryption_keys (key_id)
    SELECT unnest(%(key_ids)s::text[])
    ON CONFLICT (key_id) DO NOTHING
), recorded AS (
    SELECT jobqueue.audit('keys.rotate', (%(key_ids)s::text[])[1], jsonb_build_object('key_ids', %(key_ids)s::text[])) AS entry
)
SELECT key_id FROM jobqueue.encryption_keys
UNION
SELECT unnest(%(key_ids)s::text[]) FROM recorded;
