-- Listing newest first in a state that a job completing on its first attempt never enters: the
-- drain (claim and ack are non-HOT updates) writes no entry here, unlike a full index on jobs.
CREATE INDEX jobs_state_listing_idx ON jobqueue.jobs (state, id)
    WHERE state IN ('failed', 'dead_letter', 'cancelled');

COMMENT ON INDEX jobqueue.jobs_state_listing_idx IS
    'GET /jobs?state= and /admin/dlq for the rare states (failed, dead_letter, cancelled), newest first. '
    'Other listings walk jobs_pkey (time-ordered ids) under a per-page scan budget.';
