#!/usr/bin/env bash
# The test suite: lint, then pytest (tests marked gpu or slow are skipped; see README.md).
source "$(dirname "$0")/_env.sh"
.venv/bin/ruff check tuna tests
exec .venv/bin/python -m pytest -q "$@"
