"""The verification harnesses: tooling that checks jobqueue from outside, never shipped in the wheel.

    devdb.py     the local cluster of `make run`/`make bench` and of the test suite (`make db`)
    localrun.py  `make run`: the demo end to end (database, processes, addresses, the local admin key)
    hastack.py   a pg_auto_failover stack (`make ha`), for the failover test and for trying HA by hand
    faults/      the fault campaign (`make faults`): crashes, restarts and poison jobs, one table

They import jobqueue as any user would; jobqueue never imports them. Run them from the checkout
(`python -m tests.harness.<name>`), which is what puts `tests` on the path.
"""
