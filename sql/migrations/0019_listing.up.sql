-- Listing newest first in a state that a job completing on its first attempt never enters: the
-- drain (claim and ack are non-HOT updates) writes no entry here, unlike a full index on jobs.
-- "id IS NOT NULL" is always true (the primary key), and only a query that bounds id — the
-- listing's "id < cursor" — lets the planner prove it: counts by state that have narrower
-- indexes of their own (jobs_retry_wait_idx, jobs_dead_letter_idx) are never planned through
-- this one, which holds every queue's and priority's jobs of the state.
CREATE INDEX jobs_state_listing_idx ON jobqueue.jobs (state, id)
    WHERE state IN ('failed', 'dead_letter', 'cancelled') AND id IS NOT NULL;

COMMENT ON INDEX jobqueue.jobs_state_listing_idx IS
    'GET /jobs?state= and /admin/dlq for the rare states (failed, dead_letter, cancelled), newest first. '
    'Other listings walk jobs_pkey (time-ordered ids) under a per-page scan budget.';
