#!/usr/bin/env bash
# call 7 of session 11 (last, ~6 min of device time left): PREP v2.8 (aa2ce69) on the default v2w_mma
set -uo pipefail
b=build/snapK; r=$OUT/r; mkdir -p $r
S=$OUT/summary.txt
st() { local lim=$1 n=$2; shift 2; (( SECONDS + 15 > 250 )) && { echo "$n skipped" | tee -a $S; return; }; (( SECONDS + lim > 250 )) && lim=$((250-SECONDS)); local t0=$SECONDS; timeout $lim "$@" > $r/$n.log 2>&1; local rc=$?; echo "$n rc=$rc $((SECONDS-t0))s" | tee -a $S; return $rc; }
{ strings $b/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; } > $r/machine.txt 2>&1
st 40 test_kda_gpu $b/test_kda_gpu --gtest_brief=1
for s in smoke edge; do
  st 30 check-$s $b/kda-check --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --force
done
st 30 sanitizer-memcheck-smoke compute-sanitizer --tool memcheck --error-exitcode 9 $b/kda-check --shapes shapes/smoke.yaml
st 40 sanitizer-racecheck-smoke compute-sanitizer --tool racecheck --error-exitcode 9 $b/kda-check --shapes shapes/smoke.yaml
st 60 bench-contract $b/kda-bench --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-contract.md --csv $r/bench-contract.csv --force
st 60 stages $b/kda-bench --shapes shapes/contract.yaml --only h96-fixed h64-fixed --paths fused,explicit --stages --no-verify --md $r/stages.md --csv $r/stages.csv --force
st 120 check-contract $b/kda-check --shapes shapes/contract.yaml --md $r/check-contract.md --csv $r/check-contract.csv --force
tar -C $OUT -czf $OUT/r.tar.gz r
