#!/usr/bin/env bash
# de8eb35 (raw kernel: both halves' raw gate activated in the load region, half 1's G through the
# record) against fc53d7a's kernels, and the lab's v2w_rowpair_grams (grams in row-block pairs) of
# the same binary against its default, one call: GPU tests (every KdaForward test runs the rowpair
# variant too), racecheck and memcheck on the raw and packed tests of both, benches in both gate regimes
# (contract twice), kda-check of the default and the variant: smoke, edge (+ raw), long-memory
# (+ raw), contract-mixed (every backend), contract raw.
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-565}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-fc53d7a)"
step 70 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
f='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*PackedTailsAndEmptySequence/v2w_rowpair_grams*:*PackedWithEmptySequence/v2w_rowpair_grams*:*HugeAndZeroQRows/v2w_rowpair_grams*'
for tool in racecheck memcheck; do
  step 60 "$tool" compute-sanitizer --tool $tool --error-exitcode 9 $NEW/test_kda_gpu --gtest_filter="$f"
done
bench() {  # TAG BINARY FILE ARGS...
  local tag=$1 bin=$2 file=$3; shift 3
  step 90 "bench-$file-$tag" "$bin" --shapes "shapes/$file.yaml" --no-verify --paths fused,raw \
    --csv "$r/bench-$file-$tag.csv" --md "$r/bench-$file-$tag.md" --force "$@"
}
cmp() { step 10 "compare-$1" $NEW/kda-bench compare "$r/bench-$2.csv" "$r/bench-$3.csv" --mode warm --md "$r/compare-$1.md" --force; }
V=(--variant v2w_rowpair_grams)
bench base $NEW/kda-bench-fc53d7a contract
bench new $NEW/kda-bench contract
bench rowpair $NEW/kda-bench contract "${V[@]}"
bench new2 $NEW/kda-bench contract
cmp contract-new-vs-base contract-base contract-new
cmp contract-rowpair-vs-new contract-new contract-rowpair
cmp contract-rowpair-vs-new2 contract-new2 contract-rowpair
bench base $NEW/kda-bench-fc53d7a contract-mixed
bench new $NEW/kda-bench contract-mixed
bench rowpair $NEW/kda-bench contract-mixed "${V[@]}"
cmp contract-mixed-new-vs-base contract-mixed-base contract-mixed-new
cmp contract-mixed-rowpair-vs-new contract-mixed-new contract-mixed-rowpair
for c in smoke edge edge:raw long-memory long-memory:raw contract-mixed contract:raw; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 150 "$name" $NEW/kda-check --rms-limit 4e-3 --variant v2w_mma v2w_rowpair_grams "${backend[@]}" \
    --shapes "shapes/$file.yaml" --md "$r/$name.md" --csv "$r/$name.csv" --force
done
finish
