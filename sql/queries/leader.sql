-- Leader leases: one row per leader-only role. A lease row (not a session advisory lock) so that
-- election works through PgBouncer in transaction mode.

-- name: leader_attempt_elect
-- Take the lease when it is free or expired, or renew it when we already hold it.
INSERT INTO jobqueue.leaders AS l (name, leader_id, elected_at, expires_at)
VALUES (%(name)s, %(leader_id)s, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(ttl_seconds)s))
ON CONFLICT (name) DO UPDATE
SET leader_id = EXCLUDED.leader_id,
    elected_at = CASE WHEN l.leader_id = EXCLUDED.leader_id THEN l.elected_at ELSE EXCLUDED.elected_at END,
    expires_at = EXCLUDED.expires_at
WHERE l.leader_id = EXCLUDED.leader_id OR l.expires_at < coalesce(%(now)s::timestamptz, now())
RETURNING leader_id;

-- name: leader_resign
-- Give the lease up on clean shutdown and tell waiting candidates at once.
WITH gone AS (
    DELETE FROM jobqueue.leaders WHERE name = %(name)s AND leader_id = %(leader_id)s RETURNING name
)
SELECT pg_notify('jobqueue_leader', name) FROM gone;

-- name: leader_current
SELECT leader_id, elected_at, expires_at FROM jobqueue.leaders
WHERE name = %(name)s AND expires_at >= coalesce(%(now)s::timestamptz, now());
