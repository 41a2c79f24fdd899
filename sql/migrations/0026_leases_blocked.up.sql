-- The jobs whose lease a worker's last renewal passed over because another transaction held their
-- row locked (an operator's SELECT … FOR UPDATE, a cancel inside a caller's open transaction),
-- written with its registry heartbeat. The renewal skips such rows instead of waiting for them (one
-- locked row used to stall every lease of its worker); the sweeper leaves an expired lease alone
-- while the worker holding it beats and lists it here, since that lease ran out only because
-- someone else's lock kept it from being renewed.
ALTER TABLE jobqueue.workers ADD COLUMN leases_blocked uuid[] NOT NULL DEFAULT '{}';

COMMENT ON COLUMN jobqueue.workers.leases_blocked IS 'Jobs this worker holds whose lease its last renewal could not extend because another transaction held their row locked; the sweeper leaves them to it while it heartbeats.';
