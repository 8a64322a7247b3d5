#!/usr/bin/env bash
# Regenerate BENCHMARKS.md and its figures (docs/bench/) on this machine, with one command:
# tuna bench rank (shipped pools) + tuna bench tune + tuna bench network, then tuna bench report.
#
# Budgets, from the environment (defaults are the documented full run):
#   WORKLOADS   workloads of `bench tune`              (default "GMM:1 C2D:1 C1D:0 DEP:0 NRM:0 SFM:1")
#   TRIALS      trials of each tuner in `bench tune`   (default 64)
#   SEARCHES    tuna's searches in `bench tune`        (default "evolutionary,es")
#   MORE_SEEDS  more seeds of those searches           (default "1,2"; "" for one run each)
#   MODELS      networks of `bench network`            (default resnet18,resnet50,mobilenetv2,bert)
#   NET_TRIALS  trials per task in `bench network`     (default 64)
#   RANK_ARGS   arguments of `bench rank`              (default: all shipped pools, tiers ir,full)
#   HYBRID_WORKLOADS  workloads of `bench hybrid`      (default: the command's, the set-aside families)
#   MEASURE     measured trials of tuna's hybrid tuning (default 32)
#   SKIP        sections to leave out, e.g. "network"  (default none)
#   OUT         folder of the JSON and PNGs            (default docs/bench)
#   WORK        tuning databases and logs              (default a fresh folder under /tmp)
#   NOTE        a caveat printed in bold at the top of BENCHMARKS.md (default none)
# The full run with the defaults is long on 2 cores: about 5 min for rank, about 8 min per workload
# for tune (three seeds of each search), and for network at 64 trials per task, BERT (11 tasks):
# tuna 6 min, MetaSchedule measuring about 20 min (2026-11-24, Zen 4); ResNet-50 and MobileNetV2
# have several times as many tasks: many hours in all, which may be run network by network
# (MODELS=bert SKIP="rank tune"), the JSON of each joined by `tuna bench report --network A --network B`.
# A smoke run with tiny budgets (about 17 minutes on 2 cores shared with other jobs):
#   WORKLOADS=NRM:0 TRIALS=8 MODELS=bert NET_TRIALS=1 \
#     RANK_ARGS="tuna/data/pools/NRM-0.json tuna/data/pools/SFM-1.json --tiers ir" \
#     bash scripts/benchmarks.sh
source "$(dirname "$0")/_env.sh"
# PyTorch eager is a row of `bench network` (optional: the row says when it is missing).
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet torch \
    || echo "tuna: PyTorch could not be installed; bench network leaves its row out" >&2
WORKLOADS=${WORKLOADS:-"GMM:1 C2D:1 C1D:0 DEP:0 NRM:0 SFM:1"}
TRIALS=${TRIALS:-64}
SEARCHES=${SEARCHES:-evolutionary,es}
MORE_SEEDS=${MORE_SEEDS-1,2}
MODELS=${MODELS:-resnet18,resnet50,mobilenetv2,bert}
NET_TRIALS=${NET_TRIALS:-64}
RANK_ARGS=${RANK_ARGS:-}
HYBRID_WORKLOADS=${HYBRID_WORKLOADS:-}
MEASURE=${MEASURE:-32}
SKIP=${SKIP:-}
NOTE=${NOTE:-}
OUT=${OUT:-docs/bench}
WORK=${WORK:-$(mktemp -d /tmp/tuna-bench.XXXXXX)}
mkdir -p "$OUT" "$WORK"
tuna=.venv/bin/tuna
report=()
start=$(date +%s)
echo "tuna: benchmarks on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; work in $WORK" >&2
if [[ " $SKIP " != *" rank "* ]]; then
    # shellcheck disable=SC2086  # RANK_ARGS is a list of words
    $tuna bench rank $RANK_ARGS --json "$OUT/rank.json" --png "$WORK/rank.png"
    report+=(--rank "$OUT/rank.json")
fi
if [[ " $SKIP " != *" tune "* ]]; then
    # shellcheck disable=SC2086
    $tuna bench tune $WORKLOADS --trials "$TRIALS" --search "$SEARCHES" ${MORE_SEEDS:+--more-seeds "$MORE_SEEDS"} \
        --work-dir "$WORK/tune" --json "$OUT/tune.json"
    report+=(--tune "$OUT/tune.json")
fi
if [[ " $SKIP " != *" network "* ]]; then
    $tuna bench network --models "$MODELS" --trials-per-task "$NET_TRIALS" --work-dir "$WORK/network" \
        --json "$OUT/network.json"
    report+=(--network "$OUT/network.json")
fi
if [[ " $SKIP " != *" hybrid "* ]]; then
    # shellcheck disable=SC2086  # HYBRID_WORKLOADS is a list of words (empty: the command's default)
    $tuna bench hybrid $HYBRID_WORKLOADS --measure "$MEASURE" --work-dir "$WORK/hybrid" --json "$OUT/hybrid.json"
    report+=(--hybrid "$OUT/hybrid.json")
fi
budget="WORKLOADS=\"$WORKLOADS\" TRIALS=$TRIALS SEARCHES=$SEARCHES MORE_SEEDS=\"$MORE_SEEDS\" MODELS=$MODELS"
budget+=" NET_TRIALS=$NET_TRIALS"
[[ -n "$RANK_ARGS" ]] && budget+=" RANK_ARGS=\"$RANK_ARGS\""
[[ -n "$HYBRID_WORKLOADS" ]] && budget+=" HYBRID_WORKLOADS=\"$HYBRID_WORKLOADS\""
budget+=" MEASURE=$MEASURE"
[[ -n "$SKIP" ]] && budget+=" SKIP=\"$SKIP\""
$tuna bench report "${report[@]}" --figures "$OUT" --command-line "$budget bash scripts/benchmarks.sh" \
    ${NOTE:+--note "$NOTE"} -o BENCHMARKS.md
echo "tuna: benchmarks done in $(( $(date +%s) - start )) s" >&2
