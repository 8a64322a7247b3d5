#!/usr/bin/env bash
# Measure the twenty network-layer pools tuna ships (tuna/data/pools/README.md) on this
# machine, into OUT_DIR, one `tuna bench collect` each (192 trials, every candidate timed
# twice): about 1 h 40 min on a 2-core AMD EPYC. Keep the machine otherwise idle: the
# timings are the ground truth. Pools already in OUT_DIR are kept, not measured again.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash scripts/collect_network_pools.sh OUT_DIR}
[ -x .venv/bin/tuna ] || source scripts/_env.sh
mkdir -p "$out"
for task in \
    resnet50/fused_conv2d3_add2_relu1 mobilenetv2/fused_conv2d12_add9_tir_clip5 bert/fused_matmul_add \
    bert/fused_matmul1_multiply resnet50/max_pool2d bert/softmax bert/layer_norm resnet50/fused_conv2d_add_relu \
    mobilenetv2/fused_conv2d1_add_tir_clip bert/fused_matmul3_add2_gelu resnet50/fused_conv2d2_add2_relu1 \
    bert/matmul2 resnet50/fused_conv2d10_add6_relu4 mobilenetv2/fused_conv2d4_add3_tir_clip2 \
    resnet50/adaptive_avg_pool2d resnet50/fused_conv2d14_add8_add11_relu8 bert/fused_matmul4_add_add1 \
    mobilenetv2/fused_conv2d17_add13_tir_clip7 resnet50/fused_conv2d15_add10_relu7 \
    mobilenetv2/fused_conv2d11_add9_tir_clip5; do
    file="$out/${task//\//-}.json.gz"
    [ -f "$file" ] && continue
    .venv/bin/tuna bench collect "$task" -o "$file" --work-dir "$out/work/${task//\//-}"
done
