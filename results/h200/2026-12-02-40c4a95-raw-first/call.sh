#!/usr/bin/env bash
# Call 1: GPU tests (raw-input kernel), checks on smoke/edge/long-memory, bench vs 811e2a6 in both
# regimes, then sanitizers on the raw-input tests (after the timing, never beside it).
set -u
B=.device/new/bin
BIN=$B BASE_BIN=.device/base BASE_FILES="contract contract-mixed" VARIANTS=v2w_mma CHECK_ARGS="--rms-limit 4e-3" ALLMODES=0 GBENCH=0 BENCH_ARGS="--warmup 300" DEADLINE=430 bash scripts/h200-run.sh quick
mkdir -p $OUT/san
for tool in memcheck racecheck synccheck; do
  timeout 50 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 \
    --gtest_filter='V2Variants/KdaRawForward.PackedTailsAndEmptySequence/2:V2Variants/KdaRawForward.HugeTinyAndZeroKRows/0:KdaGpu.GateCumsumPacked' > $OUT/san/$tool.log 2>&1
  echo "sanitizer $tool rc=$?" | tee -a $OUT/san/summary.txt
done
tail -5 $OUT/san/*.log
