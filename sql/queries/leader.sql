-- Leader leases: one row per leader-only role. A lease row (not a session advisory lock) so that
-- election works through PgBouncer in transaction mode.

-- name: leader_attempt_elect
-- Take the lease when it is free or expired, or renew it when we already hold it. Returns whether
-- we hold it now, and in how many seconds the lease we hold or lost to runs out (database time,
-- so a candidate can come back right then; NULL when a racing candidate's row is not visible yet).
WITH attempt AS (
    INSERT INTO jobqueue.leaders AS l (name, leader_id, elected_at, expires_at)
    VALUES (%(name)s, %(leader_id)s, coalesce(%(now)s::timestamptz, now()),
            coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(ttl_seconds)s))
    ON CONFLICT (name) DO UPDATE
    SET leader_id = EXCLUDED.leader_id,
        elected_at = CASE WHEN l.leader_id = EXCLUDED.leader_id THEN l.elected_at ELSE EXCLUDED.elected_at END,
        expires_at = EXCLUDED.expires_at
    WHERE l.leader_id = EXCLUDED.leader_id OR l.expires_at < coalesce(%(now)s::timestamptz, now())
    RETURNING l.expires_at
)
SELECT true AS won, extract(epoch FROM a.expires_at - coalesce(%(now)s::timestamptz, now()))::float8 AS expires_in
FROM attempt a
UNION ALL
SELECT false, (SELECT extract(epoch FROM c.expires_at - coalesce(%(now)s::timestamptz, now()))::float8
               FROM jobqueue.leaders c WHERE c.name = %(name)s)
WHERE NOT EXISTS (SELECT 1 FROM attempt);

-- name: leader_resign
-- Give the lease up on clean shutdown and tell waiting candidates at once.
WITH gone AS (
    DELETE FROM jobqueue.leaders WHERE name = %(name)s AND leader_id = %(leader_id)s RETURNING name
)
SELECT pg_notify('jobqueue_leader', name) FROM gone;
