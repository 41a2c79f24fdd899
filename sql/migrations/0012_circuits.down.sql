DROP TABLE jobqueue.circuit_job_types;
DROP TABLE jobqueue.circuits;
DROP FUNCTION jobqueue.notify_circuit_job_types();
DROP FUNCTION jobqueue.notify_circuits();
