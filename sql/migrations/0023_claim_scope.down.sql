-- 0023_claim_scope undone.
DROP INDEX jobqueue.jobs_claim_type_idx;
