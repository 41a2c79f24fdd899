ALTER TABLE jobqueue.workers DROP COLUMN leases_blocked;
