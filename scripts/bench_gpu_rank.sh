#!/usr/bin/env bash
# tuna's GPU model ranking the A100 ResNet-34 database tuna ships, as BENCHMARKS.md reports it:
#   bash scripts/bench_gpu_rank.sh OUT_DIR [JOBS]
# 1. the database as pools (scripts/import_a100.sh; skipped when OUT_DIR/pools holds them);
# 2. the IR tier with MetaSchedule's XGBModel-64 beside it, 256 candidates drawn per pool;
# 3. the full tier (nvcc on PATH or TUNA_NVCC), 128 candidates drawn per pool, with XGBModel
#    trained on the same split (a third of the 128): it compiles each candidate (about 1 s each
#    on one core), so this step takes about 45 minutes on 2 cores;
# 4. the full tier's coefficients refitted on all pools, as tuna/data/coeffs/a100.toml ships them.
# Features are kept in OUT_DIR/features: a rerun with unchanged code analyses nothing again.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash scripts/bench_gpu_rank.sh OUT_DIR [JOBS]}
jobs=${2:-$(nproc)}
[ -x .venv/bin/tuna ] || source scripts/_env.sh
mkdir -p "$out"
ls "$out"/pools/task*.json >/dev/null 2>&1 || bash scripts/import_a100.sh "$out/pools" "$jobs"
.venv/bin/tuna bench rank "$out/pools" --target a100 --tiers ir --sample 256 \
  --features-cache "$out/features" --json "$out/rank-ir.json"
.venv/bin/tuna bench rank "$out/pools" --target a100 --tiers full --sample 128 \
  --features-cache "$out/features" --json "$out/rank-full.json"
# 4. the full tier's coefficients tuna ships (tuna/data/coeffs/a100.toml), fitted on every pool.
.venv/bin/tuna calibrate "$out/pools" --target a100 --tiers full --sample 128 \
  --features-cache "$out/features" -o "$out/a100.toml"
