#!/usr/bin/env bash
# a9e41b4 (half 1's k / gate and v prefetched into L2) against 29f0516's kernels (= 81bb58c's SASS,
# binary built from 87e6bbd + the review diff that became 29f0516), and the grams-pad probe (29f0516
# with every warp running two gram tasks; timing only), one call: GPU tests, benches in both gate
# regimes, stage times, a source-level Nsight Compute profile of the new contract PREP, racecheck,
# kda-check.
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-420}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-base); probe: $(binary_commit $NEW/kda-bench-gramspad)"
step 60 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE PATHS
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
cmp() { step 10 "compare-$1" $NEW/kda-bench compare "$r/bench-$2.csv" "$r/bench-$3.csv" --mode warm --md "$r/compare-$1.md" --force; }
bench base $NEW/kda-bench-base contract fused,raw,explicit
bench new $NEW/kda-bench contract fused,raw,explicit
bench pad $NEW/kda-bench-gramspad contract fused,raw
bench new2 $NEW/kda-bench contract fused,raw
bench base2 $NEW/kda-bench-base contract fused,raw
cmp contract-new-vs-base contract-base contract-new
cmp contract-new2-vs-base2 contract-base2 contract-new2
cmp contract-pad-vs-base contract-base contract-pad
bench base $NEW/kda-bench-base contract-mixed fused,raw
bench new $NEW/kda-bench contract-mixed fused,raw
cmp contract-mixed-new-vs-base contract-mixed-base contract-mixed-new
step 60 stages-new $NEW/kda-bench --shapes shapes/contract.yaml --no-verify --paths fused,raw --stages \
  --csv "$r/stages-new.csv" --md "$r/stages-new.md" --force
step 90 ncu-prep ncu --clock-control none -k regex:prep_kernel -c 1 --set full --import-source yes \
  -o "$r/prep" $NEW/kda-bench --shapes shapes/contract.yaml --only h96-fixed --paths fused --no-verify \
  --min-samples 1 --min-time 0 --warmup 0 -q
step 30 ncu-source ncu -i "$r/prep.ncu-rep" --page source --csv --print-source sass
step 30 ncu-details ncu -i "$r/prep.ncu-rep" --page details
rm -f "$r/prep.ncu-rep"
step 60 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu \
  --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*PackedWithEmptySequence/v2w_mma*:*HugeAndZeroQRows/v2w_mma*'
for c in smoke edge edge:raw long-memory long-memory:raw contract:raw; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 100 "$name" $NEW/kda-check --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
finish
