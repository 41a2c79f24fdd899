-- 0032_audit_log: who did what, when, from where (issue 23; docs/security.md "Audit log").
--
-- jobqueue.audit(action, target, details) appends one entry; every operator and producer action
-- calls it in its own statement or function (sql/queries/*.sql, jobqueue.cancel(), the role
-- functions), so the entry is in the transaction of the action: both commit or neither does,
-- whichever path — REST, CLI, Python client, psql — ran it. Job lifecycle transitions (claims,
-- acks, sweeps) are not actions and are not recorded: the hot path writes nothing more.
--
-- Who: the session's login role (session_user, which SET ROLE does not change) and the producer
-- it is held to (jobqueue.session_producer()), its application_name and client address; or, when
-- the REST API acts for an API key, the key, its producer and the HTTP client's address, which the
-- API passes in the transaction-local setting jobqueue.actor. That setting is believed only from
-- a login holding jobqueue_api (or the owner): any session may set it, and one that is not the
-- API is recorded as itself whatever it claims.
--
-- Append-only: no role holds INSERT, UPDATE, DELETE or TRUNCATE on the log (audit() and the
-- pruner run as its owner), and a trigger refuses every UPDATE and DELETE but the two the owner's
-- own functions make — the chaining of a new entry, and the retention's removal of the oldest.
--
-- Tamper-evident: each entry's hash is sha256(the previous entry's hash || the entry), so an
-- entry edited, inserted or removed by someone with table access (a superuser, the owner) breaks
-- the chain there, and `jobqueue audit verify` names the first place it breaks. The chain position
-- (seq) and the hashes are assigned at COMMIT, by a deferred trigger holding the one row of
-- jobqueue.audit_chain only from then to the end of the commit: transactions that act at the same
-- time both commit, in turn, and the chain stays one line in commit order — yet a producer's long
-- transaction that cancelled a job does not hold every other action back until it ends.

CREATE TABLE jobqueue.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT audit_log_pkey PRIMARY KEY,
    seq bigint CONSTRAINT audit_log_seq_key UNIQUE,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text,
    details jsonb NOT NULL,
    api_key_id uuid,
    client_addr text,
    db_role text NOT NULL,
    application_name text NOT NULL,
    producer_id text,
    prev_hash bytea,
    hash bytea,
    xact xid8 NOT NULL DEFAULT pg_current_xact_id()  -- the writing transaction: what its COMMIT chains
);
-- The entries written and not chained yet: only the committing transaction's own, a few rows.
CREATE INDEX audit_log_unchained_idx ON jobqueue.audit_log (xact) WHERE seq IS NULL;
-- A producer's own entries, newest first (GET /admin/audit with a producer key).
CREATE INDEX audit_log_producer_idx ON jobqueue.audit_log (producer_id, seq) WHERE producer_id IS NOT NULL;
COMMENT ON TABLE jobqueue.audit_log IS 'Append-only, hash-chained record of every operator and producer action (docs/security.md "Audit log"); read it through jobqueue.audit_trail.';
COMMENT ON COLUMN jobqueue.audit_log.id IS 'Insert order; seq is the order of the chain (commit order).';
COMMENT ON COLUMN jobqueue.audit_log.actor IS 'Who: the API key''s producer id when the REST API acted for a key, else the login role.';
COMMENT ON COLUMN jobqueue.audit_log.producer_id IS 'The producer the actor is held to (a producer key or login): whose own entries these are.';

-- The head of the chain (last_seq, last_hash) and its anchor (the last entry retention removed).
CREATE TABLE jobqueue.audit_chain (
    one boolean PRIMARY KEY DEFAULT true CONSTRAINT audit_chain_one_row CHECK (one),
    last_seq bigint NOT NULL,
    last_hash bytea NOT NULL,
    pruned_seq bigint NOT NULL,
    pruned_hash bytea NOT NULL,
    pruned_at timestamptz
);
INSERT INTO jobqueue.audit_chain (last_seq, last_hash, pruned_seq, pruned_hash)
VALUES (0, sha256('jobqueue.audit_log'::bytea), 0, sha256('jobqueue.audit_log'::bytea));
COMMENT ON TABLE jobqueue.audit_chain IS 'The audit chain''s head (the newest entry''s seq and hash) and anchor (the last entry retention removed).';

-- What an entry's hash covers: the previous hash and every field but id and xact (insert order and
-- the writing transaction, bookkeeping of the chaining, not part of the record). The time as epoch seconds, so the text does not depend on the session's TimeZone.
CREATE FUNCTION jobqueue.audit_hash(entry jobqueue.audit_log) RETURNS bytea
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT sha256(entry.prev_hash || convert_to(jsonb_build_array(
        entry.seq, extract(epoch FROM entry.at), entry.actor, entry.action, entry.target, entry.details,
        entry.api_key_id, entry.client_addr, entry.db_role, entry.application_name, entry.producer_id)::text, 'UTF8'));
$$;
COMMENT ON FUNCTION jobqueue.audit_hash(jobqueue.audit_log) IS 'An audit entry''s hash: sha256 of the previous entry''s hash and this entry''s fields.';

CREATE FUNCTION jobqueue.audit(action text, target text DEFAULT NULL, details jsonb DEFAULT '{}'::jsonb) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    claimed text := nullif(current_setting('jobqueue.actor', true), '');
    claim jsonb;
    who text := session_user;
    producer text;
    key_id uuid;
    address text := host(inet_client_addr());
    entry_id bigint;
BEGIN
    IF audit.action IS NULL OR audit.action !~ '^[a-z_]{1,32}\.[a-z_]{1,32}$' THEN
        PERFORM jobqueue.invalid('action', format('must be <area>.<verb> in lower case (got %s)', coalesce(audit.action, 'none')));
    END IF;
    IF length(audit.target) > 1000 THEN
        PERFORM jobqueue.invalid('target', 'must be at most 1000 characters');
    END IF;
    IF audit.details IS NULL OR jsonb_typeof(audit.details) <> 'object' OR octet_length(audit.details::text) > 16384 THEN
        PERFORM jobqueue.invalid('details', 'must be a JSON object of at most 16 kB');
    END IF;
    IF claimed IS NOT NULL AND (
        pg_has_role(session_user, 'jobqueue_api', 'USAGE')
        OR pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'jobqueue.audit_log'::regclass), 'USAGE')
    ) THEN
        claim := claimed::jsonb;
        IF jsonb_typeof(claim) IS DISTINCT FROM 'object' OR jsonb_typeof(claim->'actor') IS DISTINCT FROM 'string'
           OR length(claim->>'actor') NOT BETWEEN 1 AND 200 OR length(claim->>'producer') > 200
           OR length(claim->>'client') > 100 THEN
            PERFORM jobqueue.invalid('actor', 'jobqueue.actor must be {"actor", "key_id", "producer", "client"}');
        END IF;
        who := claim->>'actor';
        key_id := (claim->>'key_id')::uuid;
        producer := claim->>'producer';
        address := claim->>'client';
    ELSE
        producer := jobqueue.session_producer();
    END IF;
    INSERT INTO jobqueue.audit_log (at, actor, action, target, details, api_key_id, client_addr, db_role,
                                    application_name, producer_id)
    VALUES (clock_timestamp(), who, audit.action, audit.target, audit.details, key_id, address, session_user,
            left(current_setting('application_name'), 64), producer)
    RETURNING id INTO entry_id;
    RETURN entry_id;
END $$;
COMMENT ON FUNCTION jobqueue.audit(text, text, jsonb) IS 'Record an action in jobqueue.audit_log, in the caller''s transaction, as the session''s login (or the API key the REST API acts for); returns the entry''s id.';

-- At COMMIT (deferred): the place of the transaction's entries at the end of the chain, and the
-- new head. The first of its triggers to fire chains every entry the transaction wrote, in the order
-- it wrote them, and moves the head once; the others find theirs chained. (A trigger per entry
-- that moved the head each time made a transaction of n entries cost n²: 20,000 cancels in one
-- psql statement took 71 s to commit.)
CREATE FUNCTION jobqueue.audit_chain_entry() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    head jobqueue.audit_chain;
    entry jobqueue.audit_log;
BEGIN
    IF EXISTS (SELECT FROM jobqueue.audit_log a WHERE a.id = NEW.id AND a.seq IS NOT NULL) THEN
        RETURN NULL;  -- chained with the others of its transaction
    END IF;
    SELECT * INTO head FROM jobqueue.audit_chain FOR UPDATE;  -- another committer's turn ends with its commit
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobqueue: the audit chain''s head (jobqueue.audit_chain) is missing' USING ERRCODE = 'data_corrupted';
    END IF;
    FOR entry IN SELECT * FROM jobqueue.audit_log a WHERE a.seq IS NULL AND a.xact = pg_current_xact_id() ORDER BY a.id LOOP
        entry.seq := head.last_seq + 1;
        entry.prev_hash := head.last_hash;
        entry.hash := jobqueue.audit_hash(entry);
        UPDATE jobqueue.audit_log a SET seq = entry.seq, prev_hash = entry.prev_hash, hash = entry.hash WHERE a.id = entry.id;
        head.last_seq := entry.seq;
        head.last_hash := entry.hash;
    END LOOP;
    UPDATE jobqueue.audit_chain SET last_seq = head.last_seq, last_hash = head.last_hash;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER audit_log_chain AFTER INSERT ON jobqueue.audit_log
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobqueue.audit_chain_entry();

-- An entry is written without a place in the chain, by the transaction writing it; the two changes
-- it may then see are its chaining (seq and hashes set once, nothing else changed) and its removal
-- by jobqueue.prune_audit_log(). Anything else is refused, the owner's too.
CREATE FUNCTION jobqueue.audit_log_append_only() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.seq IS NULL AND NEW.prev_hash IS NULL AND NEW.hash IS NULL
       AND NEW.xact = pg_current_xact_id() THEN
        RETURN NEW;  -- its place in the chain is its COMMIT's to give
    ELSIF TG_OP = 'UPDATE' AND OLD.seq IS NULL AND NEW.seq IS NOT NULL
       AND (OLD.id, OLD.at, OLD.actor, OLD.action, OLD.target, OLD.details, OLD.api_key_id, OLD.client_addr,
            OLD.db_role, OLD.application_name, OLD.producer_id, OLD.xact)
           IS NOT DISTINCT FROM
           (NEW.id, NEW.at, NEW.actor, NEW.action, NEW.target, NEW.details, NEW.api_key_id, NEW.client_addr,
            NEW.db_role, NEW.application_name, NEW.producer_id, NEW.xact) THEN
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' AND current_setting('jobqueue.audit_pruning', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'jobqueue: audit_log is append-only (% refused); entries leave only by retention, jobqueue.prune_audit_log()', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER audit_log_append_only BEFORE INSERT OR UPDATE OR DELETE ON jobqueue.audit_log
    FOR EACH ROW EXECUTE FUNCTION jobqueue.audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON jobqueue.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.audit_log_append_only();

-- Retention (the maintenance leader's pruner, as the owner): the oldest entries written more than
-- `keep` ago by the database's clock (at least a day: whoever may prune cannot empty the log of
-- today's entries), at most max_rows, and only ever a prefix of the chain — it stops at the first
-- entry it keeps — so what remains verifies from the anchor it leaves (the last removed entry's
-- hash). A prune that removed entries is itself an entry (audit.prune): who pruned, how far.
CREATE FUNCTION jobqueue.prune_audit_log(keep interval, max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    through bigint;
    through_hash bytea;
    removed integer;
BEGIN
    IF keep IS NULL OR keep < interval '1 day' THEN
        PERFORM jobqueue.invalid('keep', format('audit entries are kept at least 1 day (got %s)', coalesce(keep::text, 'none')));
    END IF;
    IF max_rows IS NULL OR max_rows < 1 THEN
        PERFORM jobqueue.invalid('max_rows', 'must be at least 1');
    END IF;
    PERFORM 1 FROM jobqueue.audit_chain FOR UPDATE;
    SELECT p.seq, p.hash INTO through, through_hash FROM (
        SELECT a.seq, a.hash, bool_and(a.at < now() - keep) OVER (ORDER BY a.seq) AS expired
        FROM (SELECT l.seq, l.hash, l.at FROM jobqueue.audit_log l WHERE l.seq IS NOT NULL ORDER BY l.seq LIMIT max_rows) a
    ) p
    WHERE p.expired ORDER BY p.seq DESC LIMIT 1;
    IF through IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM set_config('jobqueue.audit_pruning', 'on', true);
    DELETE FROM jobqueue.audit_log l WHERE l.seq <= through;
    GET DIAGNOSTICS removed = ROW_COUNT;
    PERFORM set_config('jobqueue.audit_pruning', 'off', true);
    UPDATE jobqueue.audit_chain SET pruned_seq = through, pruned_hash = through_hash, pruned_at = now();
    PERFORM jobqueue.audit('audit.prune', NULL, jsonb_build_object(
        'removed', removed, 'through_seq', through, 'keep_days', extract(epoch FROM keep) / 86400));
    RETURN removed;
END $$;
COMMENT ON FUNCTION jobqueue.prune_audit_log(interval, integer) IS 'Retention of the audit log: remove the oldest entries written more than keep (at least a day) ago, a prefix of the chain, at most max_rows, and record it; the maintenance leader''s pruner calls it.';

-- Readable in psql: SELECT * FROM jobqueue.audit_trail ORDER BY seq DESC LIMIT 20;
CREATE VIEW jobqueue.audit_trail WITH (security_invoker = true) AS
SELECT a.seq, a.at, a.actor, a.action, a.target, a.details, a.api_key_id, a.client_addr, a.db_role,
       a.application_name, a.producer_id, encode(a.hash, 'hex') AS hash
FROM jobqueue.audit_log a
WHERE a.seq IS NOT NULL;
COMMENT ON VIEW jobqueue.audit_trail IS 'The audit log as operators read it (newest: ORDER BY seq DESC); a producer login sees its own entries only.';

REVOKE EXECUTE ON FUNCTION jobqueue.audit(text, text, jsonb), jobqueue.prune_audit_log(interval, integer),
    jobqueue.audit_hash(jobqueue.audit_log), jobqueue.audit_chain_entry(), jobqueue.audit_log_append_only() FROM PUBLIC;
-- The roles whose statements record actions (producers' cancel runs as the owner).
GRANT EXECUTE ON FUNCTION jobqueue.audit(text, text, jsonb) TO jobqueue_admin, jobqueue_api;
GRANT EXECUTE ON FUNCTION jobqueue.prune_audit_log(interval, integer) TO jobqueue_worker, jobqueue_admin;
GRANT EXECUTE ON FUNCTION jobqueue.audit_hash(jobqueue.audit_log)
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly;
-- Read only, for everyone; a producer its own entries (row-level security below).
GRANT SELECT ON jobqueue.audit_log, jobqueue.audit_chain, jobqueue.audit_trail
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly;
GRANT SELECT ON jobqueue.audit_log, jobqueue.audit_trail TO jobqueue_producer;

ALTER TABLE jobqueue.audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY audit_log_every_row ON jobqueue.audit_log FOR SELECT
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly USING (true);
CREATE POLICY audit_log_own_rows ON jobqueue.audit_log FOR SELECT
    TO jobqueue_producer USING (producer_id = (SELECT jobqueue.session_producer()));

-- The SQL functions that act record themselves: cancel (producers, the API, psql) ...
CREATE OR REPLACE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
    found_job record;
BEGIN
    -- Another producer's job does not exist for a producer role.
    SELECT j.state, j.queue, j.job_type, j.producer_id INTO found_job FROM jobqueue.jobs j
     WHERE j.id = job_id AND (held IS NULL OR j.producer_id = held) FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF found_job.state IN ('pending', 'failed') THEN
        UPDATE jobqueue.jobs SET state = 'cancelled', finished_at = now(), updated_at = now()
         WHERE id = job_id;
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancelled', 'state', found_job.state, 'queue', found_job.queue, 'job_type', found_job.job_type,
            'producer_id', found_job.producer_id));
        RETURN 'cancelled';
    ELSIF found_job.state = 'processing' THEN
        UPDATE jobqueue.jobs SET cancel_requested = true, updated_at = now() WHERE id = job_id;
        PERFORM pg_notify('jobqueue_cancel', job_id::text);
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancel_requested', 'state', found_job.state, 'queue', found_job.queue,
            'job_type', found_job.job_type, 'producer_id', found_job.producer_id));
        RETURN 'cancel_requested';
    ELSIF found_job.state = 'cancelled' THEN
        RETURN 'cancelled_already';
    ELSE
        RETURN found_job.state;
    END IF;
END $$;

-- ... and the role changes of `jobqueue roles` (or the same functions in psql).
CREATE OR REPLACE FUNCTION jobqueue.grant_role(kind text, login text, producer text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF kind IS NULL OR kind NOT IN ('producer', 'worker', 'admin', 'api', 'readonly') THEN
        PERFORM jobqueue.invalid('role', 'must be one of producer, worker, admin, api, readonly');
    END IF;
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        PERFORM jobqueue.invalid('login_role', format('no role named %s: create it first (jobqueue roles login)', login));
    END IF;
    IF producer IS NOT NULL AND (kind <> 'producer' OR length(producer) NOT BETWEEN 1 AND 200) THEN
        PERFORM jobqueue.invalid('producer', 'only with role producer, 1 to 200 characters');
    END IF;
    EXECUTE format('GRANT %I TO %I', 'jobqueue_' || kind, login);
    IF producer IS NOT NULL THEN
        INSERT INTO jobqueue.producer_roles AS r (role_name, producer_id) VALUES (login, producer)
        ON CONFLICT (role_name) DO UPDATE SET producer_id = excluded.producer_id;
    END IF;
    PERFORM jobqueue.audit('role.grant', login, jsonb_build_object('role', 'jobqueue_' || kind, 'producer', producer));
    RETURN 'jobqueue_' || kind;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.revoke_role(kind text, login text) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF kind IS NULL OR kind NOT IN ('producer', 'worker', 'admin', 'api', 'readonly') THEN
        PERFORM jobqueue.invalid('role', 'must be one of producer, worker, admin, api, readonly');
    END IF;
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        PERFORM jobqueue.invalid('login_role', format('no role named %s', login));
    END IF;
    EXECUTE format('REVOKE %I FROM %I', 'jobqueue_' || kind, login);
    IF kind = 'producer' THEN
        DELETE FROM jobqueue.producer_roles WHERE role_name = login;
    END IF;
    PERFORM jobqueue.audit('role.revoke', login, jsonb_build_object('role', 'jobqueue_' || kind));
    RETURN 'jobqueue_' || kind;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.create_login(login text, password text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF login IS NULL OR length(login) NOT BETWEEN 1 AND 63 THEN
        PERFORM jobqueue.invalid('login_role', 'must be a role name of 1 to 63 characters');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login AND (rolsuper OR NOT rolcanlogin)) THEN
        PERFORM jobqueue.invalid('login_role', format('%s exists and is a superuser or cannot log in: pick another name', login));
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        IF password IS NOT NULL THEN
            EXECUTE format('ALTER ROLE %I PASSWORD %L', login, password);
            PERFORM jobqueue.audit('role.login', login, jsonb_build_object('created', false, 'password_set', true));
        END IF;
        RETURN false;
    END IF;
    IF password IS NULL THEN
        EXECUTE format('CREATE ROLE %I LOGIN', login);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', login, password);
    END IF;
    PERFORM jobqueue.audit('role.login', login, jsonb_build_object('created', true, 'password_set', password IS NOT NULL));
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.set_login_timeouts(login text, statement_timeout interval, idle_timeout interval) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login AND rolcanlogin AND NOT rolsuper) THEN
        PERFORM jobqueue.invalid('login_role', format('no login role named %s that is not a superuser', login));
    END IF;
    IF statement_timeout IS NULL OR statement_timeout < interval '0' OR statement_timeout > interval '24 hours' THEN
        PERFORM jobqueue.invalid('statement_timeout', format('must be from 0 (none) to 24 hours (got %s)', statement_timeout));
    END IF;
    IF idle_timeout IS NULL OR idle_timeout < interval '0' OR idle_timeout > interval '24 hours' THEN
        PERFORM jobqueue.invalid('idle_timeout', format('must be from 0 (none) to 24 hours (got %s)', idle_timeout));
    END IF;
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET statement_timeout = %L', login, current_database(),
                   ceil(extract(epoch FROM statement_timeout) * 1000)::bigint || 'ms');
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET idle_in_transaction_session_timeout = %L', login,
                   current_database(), ceil(extract(epoch FROM idle_timeout) * 1000)::bigint || 'ms');
    PERFORM jobqueue.audit('role.timeouts', login, jsonb_build_object(
        'statement_timeout_ms', ceil(extract(epoch FROM statement_timeout) * 1000)::bigint,
        'idle_in_transaction_timeout_ms', ceil(extract(epoch FROM idle_timeout) * 1000)::bigint));
END $$;
