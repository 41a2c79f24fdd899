"""`jobqueue bench`: issue 10's figures beside a raw baseline measured in the same run (see `run`).

Modules, one concern each: `raw` (the hand-written baseline queue), `engine` (jobqueue through its
public API), `enqueue` (enqueue one and bulk figures), `drain` (load/drain, WAL and work per job),
`backlog` (``--backlog``), `pickup`, `report` (table and JSON), `http` (REST load, also the fault
campaign's REST producers), `common` (context, connections, read-outs), and `keys` (`jobqueue bench
enqueue`: what idempotency keys cost an enqueue).
"""

from jobqueue.cli.bench.run import add_arguments, run_bench

__all__ = ["add_arguments", "run_bench"]
