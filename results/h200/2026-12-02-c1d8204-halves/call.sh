#!/usr/bin/env bash
# c1d8204 (the channel-halves contract PREP, three CTAs per SM) against 46be186 and the halves
# PREP at two CTAs per SM (launch bounds 2, a probe), one call: GPU tests, benches alternated,
# --stages, kda-check, racecheck of the contract PREP's tests.
set -u
NEW=.device/new/bin
DEADLINE=${DEADLINE:-500}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-46be186); halves2: $(binary_commit $NEW/kda-bench-halves2) (launch bounds 2)"
step 120 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE PATHS
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
for f in contract contract-mixed contract; do
  t=$([[ -e $r/bench-$f-new.csv ]] && echo -2)
  bench "b46be186$t" $NEW/kda-bench-46be186 $f fused,raw,explicit
  bench "halves2$t" $NEW/kda-bench-halves2 $f fused,explicit
  bench "new$t" $NEW/kda-bench $f fused,raw,explicit
  for b in b46be186 halves2; do
    step 10 "compare-$f-vs-$b$t" $NEW/kda-bench compare "$r/bench-$f-$b$t.csv" "$r/bench-$f-new$t.csv" \
      --mode warm --md "$r/compare-$f-vs-$b$t.md" --force
  done
done
for b in kda-bench-46be186 kda-bench-halves2 kda-bench; do
  step 60 "stages-$b" $NEW/$b --shapes shapes/contract.yaml --no-verify --paths fused --stages \
    --md "$r/stages-$b.md" --csv "$r/stages-$b.csv" --force
done
for c in smoke edge long-memory contract contract-mixed; do
  step 120 "check-$c" $NEW/kda-check --rms-limit 4e-3 --shapes "shapes/$c.yaml" --md "$r/check-$c.md" --csv "$r/check-$c.csv" --force
done
step 120 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu \
  --gtest_filter='*PackedWithEmptySequence/v2w_mma*:*HugeAndZeroQRows/v2w_mma*:*StridedTokens/v2w_mma*'
finish
