-- jobqueue's PostgreSQL roles (migration 0019; docs/security.md "Roles"): granting the group roles
-- to login roles and creating login roles for local use. The functions quote every identifier.

-- name: role_create_login
-- true: created now; false: it existed (its password changed only when %(password)s is given).
SELECT jobqueue.create_login(%(login)s, %(password)s);

-- name: role_set_timeouts
-- The login's statement_timeout and idle_in_transaction_session_timeout in this database (0: none).
SELECT jobqueue.set_login_timeouts(%(login)s, %(statement_timeout)s::interval, %(idle_timeout)s::interval);

-- name: role_grant
SELECT jobqueue.grant_role(%(kind)s, %(login)s, %(producer)s);

-- name: role_revoke
SELECT jobqueue.revoke_role(%(kind)s, %(login)s);

-- name: role_members
-- Who holds each group role, whether it can log in, and the producer id a producer acts as.
SELECT g.rolname::text, m.rolname::text, m.rolcanlogin,
       CASE WHEN g.rolname = 'jobqueue_producer' THEN coalesce(p.producer_id, m.rolname) END
FROM pg_roles g
JOIN pg_auth_members a ON a.roleid = g.oid
JOIN pg_roles m ON m.oid = a.member
LEFT JOIN jobqueue.producer_roles p ON p.role_name = m.rolname
WHERE g.rolname IN ('jobqueue_producer', 'jobqueue_worker', 'jobqueue_admin', 'jobqueue_api', 'jobqueue_readonly')
ORDER BY g.rolname, m.rolname;
