#!/usr/bin/env bash
# The main job: an offline tuning run of a built-in workload (Ansor's GMM:1, a 512x512x32
# batch matmul) for AMD Zen 4 (the machine the shipped pools were measured on) and for an
# AArch64 target (AWS Graviton2), with a report. Nothing runs on either target: tuna predicts
# every candidate statically, on whatever CPU this is.
source "$(dirname "$0")/_env.sh"
exec .venv/bin/tuna tune "${WORKLOAD:-GMM:1}" --target zen4 --target graviton2 --trials "${TRIALS:-64}" "$@"
