#!/usr/bin/env bash
# 089538d (the halves PREP without phase 5's spills) against 46be186 and c1d8204 (the same PREP
# with them), one call: GPU tests, benches alternated, --stages of the new build, quick checks,
# racecheck of the contract PREP's tests; then Nsight Compute of 46be186's contract PREP on
# h96-fixed (its kda-check) with the warp stall reasons (raw page) that c1d8204's profile lacked.
set -u
NEW=.device/new/bin
DEADLINE=${DEADLINE:-400}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-46be186); c1d8204: $(binary_commit $NEW/kda-bench-c1d8204)"
step 120 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE PATHS
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
for f in contract contract-mixed contract; do
  t=$([[ -e $r/bench-$f-new.csv ]] && echo -2)
  bench "b46be186$t" $NEW/kda-bench-46be186 $f fused,explicit
  [[ $f == contract && -z $t ]] && bench "c1d8204" $NEW/kda-bench-c1d8204 $f fused,explicit
  bench "new$t" $NEW/kda-bench $f fused,explicit
  step 10 "compare-$f-vs-b46be186$t" $NEW/kda-bench compare "$r/bench-$f-b46be186$t.csv" "$r/bench-$f-new$t.csv" \
    --mode warm --md "$r/compare-$f-vs-b46be186$t.md" --force
  [[ $f == contract && -z $t ]] && step 10 "compare-$f-vs-c1d8204" $NEW/kda-bench compare "$r/bench-$f-c1d8204.csv" \
    "$r/bench-$f-new.csv" --mode warm --md "$r/compare-$f-vs-c1d8204.md" --force
done
step 60 stages-new $NEW/kda-bench --shapes shapes/contract.yaml --no-verify --paths fused --stages \
  --md "$r/stages-new.md" --csv "$r/stages-new.csv" --force
for c in smoke edge long-memory; do
  step 60 "check-$c" $NEW/kda-check --rms-limit 4e-3 --shapes "shapes/$c.yaml" --md "$r/check-$c.md" --csv "$r/check-$c.csv" --force
done
step 100 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu \
  --gtest_filter='*PackedWithEmptySequence/v2w_mma*:*HugeAndZeroQRows/v2w_mma*:*StridedTokens/v2w_mma*'
prof() {  # NAME KDA_CHECK
  timeout 120 ncu --clock-control none -k regex:prep -c 1 --set full -o "$r/$1" -f \
    "$2" --only h96-fixed --backend fused > "$r/$1.log" 2>&1
  echo "$1 rc=$?" | tee -a "$S"
  ncu -i "$r/$1.ncu-rep" --page details > "$r/$1-details.txt" 2>&1
  ncu -i "$r/$1.ncu-rep" --page raw --csv 2>/dev/null | gzip > "$r/$1-raw.csv.gz"
  rm -f "$r/$1.ncu-rep"
}
(( DEADLINE - SECONDS > 60 )) && prof prof-46be186-prep .device/peer/bin/kda-check
(( DEADLINE - SECONDS > 40 )) && prof prof-new-prep $NEW/kda-check
finish
