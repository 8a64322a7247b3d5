#!/usr/bin/env bash
# Long fuzzing of tuna's readers (tests/test_fuzz.py): N random inputs per target (default 100000).
# Prints per target the inputs run, those a reader accepted, the failures and the wall time;
# the failing inputs (first five per target) are in the report file it names.
# Usage: scripts/fuzz.sh [N] [pytest -k expression]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-100000}"
SELECT="${2:-}"
REPORT="${TUNA_FUZZ_REPORT:-$(mktemp -t tuna-fuzz-XXXXXX.json)}"
rm -f "$REPORT"
PY="${PYTHON:-.venv/bin/python}"
start=$(date +%s)
set +e
TUNA_FUZZ_EXAMPLES="$N" TUNA_FUZZ_REPORT="$REPORT" "$PY" -m pytest -q -p no:cacheprovider -m fuzz \
    ${SELECT:+-k "$SELECT"} tests/test_fuzz.py
status=$?
set -e
"$PY" - "$REPORT" "$N" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
from pathlib import Path
path, n, total = sys.argv[1], sys.argv[2], sys.argv[3]
data = json.loads(Path(path).read_text()) if Path(path).exists() else {}
print(f"\nfuzz: {n} inputs asked per target; report {path}")
print(f"{'target':<14}{'inputs':>9}{'accepted':>10}{'failures':>10}{'seconds':>10}")
for target, row in data.items():
    print(f"{target:<14}{row['inputs']:>9}{row['accepted']:>10}{row['failures']:>10}{row['seconds']:>10}")
    for kind, count in row["kinds"].items():
        print(f"    {count} x {kind}")
print(f"total wall time {total} s")
PY
exit $status
