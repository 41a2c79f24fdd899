"""LISTEN/NOTIFY: the channel names (`channels`), one listening connection per process
(`notifier`), and the job-event hub the REST API streams from (`hub`)."""
