#!/usr/bin/env bash
# Call 2: GPU tests; kda-check (fused, explicit, l2norm, raw) on smoke, edge, long-memory, contract,
# contract-mixed at --rms-limit 4e-3; memcheck/racecheck/synccheck on smoke and on the raw-input GPU
# tests. No timing here: the peers call times ours (fused, raw) beside the peers.
set -u
B=.device/new/bin
BIN=$B VARIANTS=v2w_mma CHECK_ARGS="--rms-limit 4e-3" BENCH_FILES=" " ALLMODES=0 GBENCH=0 \
  SAN_TOOLS="memcheck racecheck synccheck" SANITIZE_SHAPES=smoke SAN_TESTS=0 DEADLINE=500 \
  bash scripts/h200-run.sh full
mkdir -p $OUT/san
for tool in memcheck racecheck synccheck; do
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 \
    --gtest_filter='V2Variants/KdaRawForward.PackedTailsAndEmptySequence/2:V2Variants/KdaRawForward.HugeTinyAndZeroKRows/0' > $OUT/san/$tool-raw-tests.log 2>&1
  echo "sanitizer $tool raw tests rc=$?" | tee -a $OUT/summary.txt
done
