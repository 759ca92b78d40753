# Tally task runner. `just` lists the recipes.
# Recipes run the `python` found on PATH (`python -m tally`, `python -m pytest`, ...), so they work
# with whatever virtual environment is active, whatever it is called. `just install` makes one
# called .venv; activate it (`. .venv/bin/activate`) before the other recipes.

set dotenv-load := false

# list the recipes
default:
    @just --list --unsorted

# --- setup -------------------------------------------------------------------------------------

# create .venv and install Tally with its test and dev tools (editable)
[group('setup')]
install:
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[dev]"

# --- serve -------------------------------------------------------------------------------------

# run Tally on embedded storage (dev mode when no JWT settings are given)
[group('serve')]
serve *ARGS:
    python -m tally serve {{ARGS}}

# apply schema/ to the configured ClickHouse
[group('serve')]
migrate:
    python -m tally migrate

# print a dev-mode session token for USER
[group('serve')]
token USER="dev":
    python -m tally token --sub {{USER}}

# --- test --------------------------------------------------------------------------------------

# run the test suite (the same command CI runs, against the real engine)
[group('test')]
test *ARGS:
    python -m pytest {{ARGS}}

# the server suite: a ClickHouse server and the 2x2 cluster in Docker (skipped without an engine)
[group('test')]
test-server *ARGS:
    python -m pytest tests/server -rs {{ARGS}}

# print the DDL for a ClickHouse cluster, as `tally migrate` would run it there
[group('serve')]
schema-cluster CLUSTER="tally_cluster":
    python -m tally schema --cluster {{CLUSTER}}

# --- bench -------------------------------------------------------------------------------------

# the full benchmark suite (ingest and dashboard up to 100M events; takes a while)
[group('bench')]
bench *ARGS:
    python -m benchmarks {{ARGS}}

# the quick benchmark suite (100k and 1M events; some tens of minutes on 2 cores)
[group('bench')]
bench-quick *ARGS:
    python -m benchmarks --quick {{ARGS}}

# --- lint --------------------------------------------------------------------------------------

# ruff lint and format check, mypy
[group('lint')]
lint:
    python -m ruff check service tests benchmarks
    python -m ruff format --check service tests benchmarks
    python -m mypy

# format the code
[group('lint')]
fmt:
    python -m ruff format service tests benchmarks
    python -m ruff check --fix service tests benchmarks
