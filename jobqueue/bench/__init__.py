"""`jobqueue bench`: issue 10's figures beside a raw baseline measured in the same run (see `run`).

A user command (measuring one's own database, as other queues ship theirs) in a room of its own:
the command line declares it (`run.add_arguments`) and imports it only when it runs; its SQL
(queries.sql, `store`) and its connections' name (``jobqueue-bench``, `common.NAME`) are its own.

Modules, one concern each: `raw` (the hand-written baseline queue), `engine` (jobqueue through its
public API), `enqueue` (enqueue one and bulk figures), `drain` (load/drain, WAL and work per job),
`backlog` (``--backlog``), `pickup`, `report` (table and JSON), `http` (REST load, also the fault
campaign's REST producers in tests/harness), `common` (context, connections, read-outs), and `keys` (`jobqueue bench
enqueue`: what idempotency keys cost an enqueue).
"""
