# The device call that produced this folder: binaries of f2a7f7d in .device/new/bin, base as in
# 2026-12-01-5936e5d-v2w4-full/call.sh (harness of this tree, lib/kda/src of 3aaa6a8).
BIN=.device/new/bin BASE_BIN=.device/base BASE_FILES="contract contract-mixed" VARIANTS=v2w_mma \
  CHECK_ARGS="--rms-limit 4e-3" ALLMODES=0 GBENCH=0 BENCH_ARGS="--warmup 300" DEADLINE=420 scripts/h200-run.sh quick
