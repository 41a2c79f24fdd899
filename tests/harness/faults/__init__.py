"""The fault campaign (`make faults`, `python -m tests.harness.faults`): jobqueue's delivery guarantees checked
under crashes, restarts, outages and poison jobs, on a durable local cluster, with one table.

    cluster.py     the PostgreSQL it crashes, one fresh database per scenario, the harness connection
    app.py         the recording app the workers run (every handler run is a committed row)
    fleet.py       jobqueue-worker processes and the jobqueue api process it kills and restarts
    producers.py   seeding, and producers over Python and REST that time every error
    scenarios.py   the scenarios
    report.py      judging a scenario's database (lost, duplicates, wrong states, recovery) and the table
    campaign.py    the command (`__main__.py` runs it)
    store.py       its Calls, on queries.sql beside it (harness-only SQL, outside the wheel)
"""
