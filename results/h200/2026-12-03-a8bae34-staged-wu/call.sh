#!/usr/bin/env bash
# a8bae34 (phase 5's W and U staged in shared memory by stmatrix, two bulk stores) against
# f06b1cc's kernels, one call: GPU tests, sanitizers on PREP's packed / huge-row tests, benches
# in both gate regimes (contract twice), stage times, kda-check contract (every backend), contract
# raw, contract-mixed, smoke, edge (+ raw), long-memory (+ raw).
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-470}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-f06b1cc)"
step 60 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
f='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*PackedWithEmptySequence/v2w_mma*:*HugeAndZeroQRows/v2w_mma*'
for tool in racecheck synccheck memcheck; do
  step 60 "$tool" compute-sanitizer --tool $tool --error-exitcode 9 $NEW/test_kda_gpu --gtest_filter="$f"
done
bench() {  # TAG BINARY FILE PATHS
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
cmp() { step 10 "compare-$1" $NEW/kda-bench compare "$r/bench-$2.csv" "$r/bench-$3.csv" --mode warm --md "$r/compare-$1.md" --force; }
bench base $NEW/kda-bench-f06b1cc contract fused,raw,explicit
bench new $NEW/kda-bench contract fused,raw,explicit
bench new2 $NEW/kda-bench contract fused,raw
bench base2 $NEW/kda-bench-f06b1cc contract fused,raw
cmp contract-new-vs-base contract-base contract-new
cmp contract-new2-vs-base2 contract-base2 contract-new2
bench base $NEW/kda-bench-f06b1cc contract-mixed fused,raw
bench new $NEW/kda-bench contract-mixed fused,raw
cmp contract-mixed-new-vs-base contract-mixed-base contract-mixed-new
step 30 stages-new $NEW/kda-bench --shapes shapes/contract.yaml --only h96-fixed h64-fixed --no-verify \
  --paths fused,raw --stages --csv "$r/stages-new.csv" --md "$r/stages-new.md" --force
for c in smoke edge edge:raw long-memory long-memory:raw contract contract:raw contract-mixed; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 130 "$name" $NEW/kda-check --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
finish
