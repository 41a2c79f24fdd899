-- The dashboard's throughput history (issue 12): one row per minute, written by the maintenance
-- leader (jobqueue.maintenance.historian), read by GET /dashboard/history, kept for a day. Each
-- row holds the running totals as last sampled in that minute; the rates come from the
-- differences between rows, so a missed sample only widens the step, never loses counts.
CREATE TABLE jobqueue.throughput_history (
    minute timestamptz PRIMARY KEY,
    measured_at timestamptz NOT NULL,
    submitted bigint NOT NULL,
    processed bigint NOT NULL,
    failed bigint NOT NULL,
    CONSTRAINT throughput_history_minute_whole CHECK (minute = date_trunc('minute', minute)),
    CONSTRAINT throughput_history_counts_positive CHECK (submitted >= 0 AND processed >= 0 AND failed >= 0)
);
COMMENT ON TABLE jobqueue.throughput_history IS 'Per minute: jobs submitted, attempts processed and failed attempts, running totals as last sampled by the maintenance leader in that minute (measured_at). Kept for a day.';
