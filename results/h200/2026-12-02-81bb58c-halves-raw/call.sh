#!/usr/bin/env bash
# 81bb58c (both PREP kernels on the channel halves, three CTAs per SM) against 46be186, one call:
# GPU tests, fused / raw / explicit benches, kda-check (every backend: contract-mixed; the raw
# path on contract), racecheck of the raw and contract PREPs' tests.
set -u
NEW=.device/new/bin
DEADLINE=${DEADLINE:-330}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-46be186)"
step 120 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths fused,raw,explicit \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
for f in contract contract-mixed; do
  bench b46be186 $NEW/kda-bench-46be186 $f
  bench new $NEW/kda-bench $f
  step 10 "compare-$f-vs-b46be186" $NEW/kda-bench compare "$r/bench-$f-b46be186.csv" "$r/bench-$f-new.csv" \
    --mode warm --md "$r/compare-$f-vs-b46be186.md" --force
done
step 100 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu \
  --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*PackedWithEmptySequence/v2w_mma*:*HugeAndZeroQRows/v2w_mma*'
for c in smoke edge edge:raw long-memory long-memory:raw contract:raw contract-mixed; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 150 "$name" $NEW/kda-check --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
finish
