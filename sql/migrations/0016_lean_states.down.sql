-- Back to the fillfactor of 0001. The columns keep their new order: every statement names the
-- columns it reads and writes, so the revision before this one works with either order.
ALTER TABLE jobqueue.jobs SET (fillfactor = 85);
