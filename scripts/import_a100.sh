#!/usr/bin/env bash
# The A100 ResNet-34 database tuna ships (tuna/data/databases/a100-resnet34, TVM 0.16) as
# pools, one per task, in the directory named: bash scripts/import_a100.sh OUT_DIR [JOBS]
# Every kept trace is applied to its workload and checked: 4.3 minutes wall (232 s in the
# import) with 2 jobs on a 2-core machine, 9 minutes when another job shares it; 4.2 GB of
# memory at most. 14,956 of the 20,089 records become candidates, in 19 pools (109 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash scripts/import_a100.sh OUT_DIR [JOBS]}
jobs=${2:-$(nproc)}
[ -x .venv/bin/tuna ] || source scripts/_env.sh
exec .venv/bin/tuna import-db tuna/data/databases/a100-resnet34 --device "NVIDIA A100" -o "$out" --jobs "$jobs"
