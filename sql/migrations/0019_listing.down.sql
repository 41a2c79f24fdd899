DROP INDEX jobqueue.jobs_state_listing_idx;
