# jobqueue — the two commands: `make run` and `make test`. Each sets up everything it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# The suite mostly waits (worker subprocesses, leases, restarts), so it runs on 2 pytest-xdist workers,
# each with a throwaway cluster of its own; tests sharing a module fixture carry an xdist_group.
TEST_WORKERS ?= 2

.PHONY: install run test bench faults db db-stop migrate clean system-deps ha ha-stop

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: system-deps $(STAMP)

# PostgreSQL server binaries (initdb/pg_ctl) for the local and test clusters; installed only when missing.
system-deps:
	@if [ -z "$$JOBQUEUE_DSN$$JOBQUEUE_TEST_DSN" ] && ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
		echo "installing PostgreSQL server binaries"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi
	@# promtool (Debian's prometheus) checks the alert rules; chromium runs the dashboard's browser test;
	@# pgbouncer (transaction pooling) runs in front of the test cluster in the PgBouncer-mode test;
	@# pg_auto_failover (monitor + keepers, for PostgreSQL 15) runs `make ha` and the failover test.
	@missing=""; command -v promtool >/dev/null || missing="$$missing prometheus"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	command -v pg_autoctl >/dev/null || missing="$$missing pg-auto-failover-cli"; \
	ls /usr/lib/postgresql/15/lib/pgautofailover.so >/dev/null 2>&1 || missing="$$missing postgresql-15-auto-failover"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# JOBQUEUE_DSN, or the local durable cluster in .pgdata started for it; a cluster that cannot
# start stops the recipe here (an empty DSN would silently mean the default 127.0.0.1:5432).
USE_DB = dsn="$${JOBQUEUE_DSN:-$$($(BIN)/python -m tests.harness.devdb start)}" && [ -n "$$dsn" ] \
	|| { echo "no database: the local PostgreSQL did not start (see .pgdata/server.log)" >&2; exit 1; }; \
	export JOBQUEUE_DSN="$$dsn"

# Starts the local durable cluster in .pgdata (unless JOBQUEUE_DSN is set) and prints its DSN.
db: install
	@$(USE_DB); echo "$$JOBQUEUE_DSN"

db-stop:
	$(BIN)/python -m tests.harness.devdb stop

# A pg_auto_failover stack in .pgdata-ha (docs/high-availability.md): a monitor, a primary and two
# standbys, a commit waiting for one of them; migrated; prints the multi-host DSN, so
# `JOBQUEUE_DSN="$$(make -s ha)" make run` runs on it. Idempotent. Ports: JOBQUEUE_HA_PORT (monitor,
# default 54340) and the next three. HA_ARGS=--two-nodes: the availability trade-off (see the docs).
ha: install
	@dsn="$$($(BIN)/python -m tests.harness.hastack start $(HA_ARGS))" && [ -n "$$dsn" ] \
		|| { echo "the HA stack did not start (logs: .pgdata-ha/*.log)" >&2; exit 1; }; \
	JOBQUEUE_DSN="$$dsn" $(BIN)/jobqueue migrate >&2 && echo "$$dsn"

ha-stop:
	$(BIN)/python -m tests.harness.hastack stop

migrate: install
	@$(USE_DB); $(BIN)/jobqueue migrate

# The worker, the API and the demo producer each log in as a role of their own (docs/security.md
# "Roles"): jobqueue_local_worker, _api and _producer, made and granted here by the migrating role
# with a fresh password each run. A role that may not create roles (no CREATEROLE) runs all of them
# as itself, as before, and says so.
ROLE_DSNS = secret=$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(16))') \
	&& WORKER_DSN=$$($(BIN)/jobqueue roles login --role worker jobqueue_local_worker --password "$$secret" 2>/dev/null) \
	&& API_DSN=$$($(BIN)/jobqueue roles login --role api jobqueue_local_api --password "$$secret" 2>/dev/null) \
	&& PRODUCER_DSN=$$($(BIN)/jobqueue roles login --role producer jobqueue_local_producer --producer demo \
	   --password "$$secret" 2>/dev/null) \
	&& echo "worker, API and demo producer log in as jobqueue_local_worker, _api and _producer" \
	|| { echo "note: this role may not create roles (CREATEROLE): everything runs as JOBQUEUE_DSN's role" >&2; \
	     WORKER_DSN="$$JOBQUEUE_DSN"; API_DSN="$$JOBQUEUE_DSN"; PRODUCER_DSN="$$JOBQUEUE_DSN"; }

# Local Postgres (unless JOBQUEUE_DSN is given) -> migrate -> worker (its own role) on the demo app and
# the leader-only maintenance (as the owner: VACUUM and REINDEX need it before PG 17) -> a few demo jobs shown completing -> keeps serving until Ctrl-C (ONCE=1: stop after the demo).
run: install
	@set -euo pipefail; \
	$(USE_DB); \
	echo "database: $$JOBQUEUE_DSN"; \
	$(BIN)/jobqueue migrate; \
	$(ROLE_DSNS); \
	JOBQUEUE_DSN="$$WORKER_DSN" $(BIN)/jobqueue-worker --app jobqueue.demo:queue --concurrency 10 --no-maintenance & WORKER=$$!; \
	$(BIN)/jobqueue maintenance & MAINTENANCE=$$!; \
	API_URL="http://127.0.0.1:$${JOBQUEUE_API_PORT:-8000}"; \
	JOBQUEUE_DSN="$$API_DSN" $(BIN)/jobqueue api & API=$$!; \
	trap 'kill -TERM $$WORKER $$MAINTENANCE $$API 2>/dev/null || true; wait $$WORKER $$MAINTENANCE $$API 2>/dev/null || true' EXIT; \
	trap 'exit 0' INT TERM; \
	JOBQUEUE_DSN="$$PRODUCER_DSN" $(BIN)/jobqueue demo --timeout 30; \
	KEY=$$($(BIN)/jobqueue apikey create --producer local --admin 2>/dev/null); \
	$(BIN)/python -m jobqueue.api.serve "$$API_URL" || { echo "the REST API did not become ready at $$API_URL"; exit 1; }; \
	echo "REST API at $$API_URL (OpenAPI: $$API_URL/schema/swagger); local admin key (shown once): $$KEY"; \
	echo "  curl -s -X POST $$API_URL/jobs -H 'Authorization: Bearer $$KEY' -H 'Content-Type: application/json' -d '{\"job_type\": \"echo\", \"payload\": {\"hi\": 1}}'"; \
	if [ -n "$${ONCE:-}" ]; then exit 0; fi; \
	echo "worker running on jobqueue.demo:queue — enqueue more with: $(BIN)/jobqueue enqueue echo --payload '{\"hi\": 1}'  (Ctrl-C stops)"; \
	wait $$WORKER

# The whole suite against a real PostgreSQL (JOBQUEUE_TEST_DSN, else a throwaway cluster it starts).
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The benchmark on a durable local cluster (or JOBQUEUE_DSN): issue 10's figures beside a raw baseline
# measured in the same run, medians of 3 runs. BENCH_ARGS="--backlog 1000000 [--hold-xmin]", "--rest",
# "--json", "--runs K", "api" (POST /jobs over HTTP only) or "enqueue" (the cost of idempotency keys);
# see `jobqueue bench --help`.
bench: install
	@$(USE_DB); \
	$(BIN)/jobqueue migrate >/dev/null && \
	$(BIN)/jobqueue bench $(BENCH_ARGS)

# The fault campaign (docs/high-availability.md "Fault campaign") on a durable cluster of its own in .pgdata-faults —
# never .pgdata or JOBQUEUE_DSN: it crashes and restarts PostgreSQL. FAULTS_ARGS narrows it,
# e.g. FAULTS_ARGS='--scenario sigkill --jobs 2000'. Exit status 1 when a scenario failed.
faults: install
	$(BIN)/python -m tests.harness.faults $(FAULTS_ARGS)

clean:
	-$(BIN)/python -m tests.harness.devdb stop
	-[ ! -d .pgdata-ha ] || $(BIN)/python -m tests.harness.hastack stop
	rm -rf $(VENV) .pgdata .pgdata-faults .pgdata-ha .pytest_cache
