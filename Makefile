# jobqueue — the two commands: `make run` and `make test`. Each sets up everything it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs, each a stamp: what running needs (`make run`, `make db`, `make bench`), and the test
# tools on top of it (`make test`): pytest, mypy, playwright, schemathesis… — a minute of its own.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PIP := $(BIN)/pip install -q --disable-pip-version-check
PYTEST_ARGS ?=
# The suite mostly waits (worker subprocesses, leases, restarts), so it runs on 2 pytest-xdist workers,
# each with a throwaway cluster of its own; tests sharing a module fixture carry an xdist_group.
TEST_WORKERS ?= 2

.PHONY: install install-run run test bench faults db db-stop migrate clean pg-server system-deps ha ha-stop

# Progress goes to stderr, so that `$$(make -s db)` is the DSN alone even on a fresh clone.
$(BIN)/python:
	@echo "creating $(VENV), a Python virtual environment for jobqueue (a few seconds)…" >&2
	@$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing jobqueue and what it needs to run into $(VENV) (about a minute the first time)…" >&2
	@start=$$SECONDS; $(PIP) -e . >&2 && echo "  installed in $$((SECONDS - start)) s" >&2
	@touch $@

# One pip run for both (what running needs comes with the extras), so `make test` on a fresh clone
# installs once; the run stamp is then true as well.
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing jobqueue and its test tools into $(VENV): pytest, mypy, playwright… (one to two minutes the first time)…" >&2
	@start=$$SECONDS; $(PIP) -e '.[test]' >&2 && echo "  installed in $$((SECONDS - start)) s" >&2
	@touch $@ $(RUN_STAMP)

# What `make run` needs: jobqueue in .venv and PostgreSQL's server binaries.
install-run: pg-server $(RUN_STAMP)

# What `make test` needs: that, the test tools, and the programs some tests drive (system-deps).
install: pg-server system-deps $(TEST_STAMP)

# PostgreSQL server binaries (initdb/pg_ctl) for the local and test clusters; installed only when missing.
pg-server:
	@if [ -z "$$JOBQUEUE_DSN$$JOBQUEUE_TEST_DSN" ] && ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
		echo "installing PostgreSQL's server binaries (Debian's postgresql package, about a minute)…" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi

system-deps:
	@# promtool (Debian's prometheus) checks the alert rules; chromium runs the dashboard's browser test;
	@# pgbouncer (transaction pooling) runs in front of the test cluster in the PgBouncer-mode test;
	@# pg_auto_failover (monitor + keepers, for PostgreSQL 15) runs `make ha` and the failover test.
	@missing=""; command -v promtool >/dev/null || missing="$$missing prometheus"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	command -v pg_autoctl >/dev/null || missing="$$missing pg-auto-failover-cli"; \
	ls /usr/lib/postgresql/15/lib/pgautofailover.so >/dev/null 2>&1 || missing="$$missing postgresql-15-auto-failover"; \
	if [ -n "$$missing" ]; then \
		echo "installing the programs the tests drive:$$missing (a few minutes)…" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# JOBQUEUE_DSN, or the local durable cluster in .pgdata started for it; a cluster that cannot
# start stops the recipe here (an empty DSN would silently mean the default 127.0.0.1:5432).
USE_DB = dsn="$${JOBQUEUE_DSN:-$$($(BIN)/python -m tests.harness.devdb start)}" && [ -n "$$dsn" ] \
	|| { echo "no database: the local PostgreSQL did not start (see .pgdata/server.log)" >&2; exit 1; }; \
	export JOBQUEUE_DSN="$$dsn"

# Starts the local durable cluster in .pgdata (unless JOBQUEUE_DSN is set) and prints its DSN.
db: install-run
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

migrate: install-run
	@$(USE_DB); $(BIN)/jobqueue migrate

# Local Postgres (unless JOBQUEUE_DSN is given) -> migrate -> a worker on the demo app, the maintenance
# services and the REST API, each as a role of its own -> demo jobs shown completing -> the dashboard's
# address and the local admin key (reused from .run/admin-key) -> serves until Ctrl-C. ONCE=1: stops
# once the demo finished and the API answered. One at a time per checkout. tests/harness/localrun.py.
run: install-run
	@$(BIN)/python -m tests.harness.localrun

# The whole suite against a real PostgreSQL (JOBQUEUE_TEST_DSN, else a throwaway cluster it starts).
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The benchmark on a durable local cluster (or JOBQUEUE_DSN): issue 10's figures beside a raw baseline
# measured in the same run, medians of 3 runs. BENCH_ARGS="--backlog 1000000 [--hold-xmin]", "--rest",
# "--json", "--runs K", "api" (POST /jobs over HTTP only) or "enqueue" (the cost of idempotency keys);
# see `jobqueue bench --help`.
bench: install-run
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
