#!/usr/bin/env bash
# The test suite: lint, then pytest (tests marked gpu or slow are skipped; see README.md).
source "$(dirname "$0")/_env.sh"
.venv/bin/ruff check tuna tests
# --durations: where the suite's time goes, on whatever machine CI runs on (budget: 30 minutes).
exec .venv/bin/python -m pytest -q --durations=25 "$@"
