DROP TABLE jobqueue.throughput_history;
