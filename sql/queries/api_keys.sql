-- Runtime queries on jobqueue.api_keys. Keys are stored as their SHA-256 only.

-- name: api_key_create
-- Creating and revoking a key are recorded in the audit log (apikey.create, apikey.revoke): the
-- key's id, producer, role, prefix, allow-lists, name and expiry, never its hash.
-- %(expires_in)s: how long the key works, from its creation (by the database's clock); NULL: for ever.
WITH created AS (
    INSERT INTO jobqueue.api_keys (key_hash, key_prefix, producer_id, role, queues, job_types, name, expires_at)
    VALUES (%(key_hash)s, %(key_prefix)s, %(producer_id)s, %(role)s, %(queues)s, %(job_types)s, %(name)s,
            now() + %(expires_in)s::interval)
    RETURNING id, producer_id, role, key_prefix, created_at, revoked_at, queues, job_types, name, expires_at
)
SELECT k.id, k.producer_id, k.role, k.key_prefix, k.created_at, k.revoked_at, k.queues, k.job_types, k.name,
       k.expires_at
FROM created k CROSS JOIN LATERAL jobqueue.audit('apikey.create', k.id::text, jsonb_build_object(
    'producer_id', k.producer_id, 'role', k.role, 'key_prefix', k.key_prefix, 'queues', k.queues,
    'job_types', k.job_types, 'name', k.name, 'expires_at', k.expires_at)) AS recorded;

-- name: api_key_lookup
-- One primary-key-like probe (the unique index on key_hash) per authentication. An expired key is
-- returned too: the API refuses it naming its expiry (and checks the expiry on every request, so a
-- key cached before it expired stops at its expiry, not at the cache's).
SELECT id, producer_id, role, key_prefix, created_at, revoked_at, queues, job_types, name, expires_at
FROM jobqueue.api_keys
WHERE key_hash = %(key_hash)s AND revoked_at IS NULL;

-- name: api_key_list
SELECT id, producer_id, role, key_prefix, created_at, revoked_at, queues, job_types, name, expires_at
FROM jobqueue.api_keys
ORDER BY created_at, id;

-- name: api_key_revoke
WITH revoked AS (
    UPDATE jobqueue.api_keys SET revoked_at = now()
    WHERE id = %(id)s AND revoked_at IS NULL
    RETURNING id, producer_id, role, key_prefix, created_at, revoked_at, queues, job_types, name, expires_at
)
SELECT k.id, k.producer_id, k.role, k.key_prefix, k.created_at, k.revoked_at, k.queues, k.job_types, k.name,
       k.expires_at
FROM revoked k CROSS JOIN LATERAL jobqueue.audit('apikey.revoke', k.id::text, jsonb_build_object(
    'producer_id', k.producer_id, 'role', k.role, 'key_prefix', k.key_prefix, 'name', k.name)) AS recorded;

-- name: api_secret
-- A key the REST API's processes share (jobqueue.api_secrets, migration 0023): 'cursor' seals
-- listing cursors. Readable by the API and admin roles only.
SELECT secret FROM jobqueue.api_secrets WHERE name = %(name)s;
