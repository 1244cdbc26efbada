#!/usr/bin/env bash
# session 12 call 4: PREP v2.10 on the default v2w_mma, with 9954cfb (snapJ) as the control
set -uo pipefail
b=build/snapM; r=$OUT/r; mkdir -p $r
S=$OUT/summary.txt
LIM=${LIM:-400}
st() { local lim=$1 n=$2; shift 2; (( SECONDS + 15 > LIM )) && { echo "$n skipped" | tee -a $S; return; }; (( SECONDS + lim > LIM )) && lim=$((LIM-SECONDS)); local t0=$SECONDS; timeout $lim "$@" > $r/$n.log 2>&1; local rc=$?; echo "$n rc=$rc $((SECONDS-t0))s" | tee -a $S; return $rc; }
{ strings $b/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; } > $r/machine.txt 2>&1
st 60 test_kda_gpu $b/test_kda_gpu --gtest_brief=1
st 40 test_bench_gpu $b/test_bench_gpu --gtest_brief=1
st 40 test_kda_validate $b/test_kda_validate --gtest_brief=1
for s in smoke edge; do
  st 30 check-$s $b/kda-check --variant v2_mma --variant v2w_mma --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --force
done
for t in memcheck racecheck synccheck; do
  st 40 sanitizer-$t-smoke compute-sanitizer --tool $t --error-exitcode 9 $b/kda-check --shapes shapes/smoke.yaml
done
st 150 bench-contract $b/kda-bench --shapes shapes/contract.yaml --warmup 300 --md $r/bench-contract.md --csv $r/bench-contract.csv --force
st 60 bench-contract-9954cfb build/ctlL/kda-bench --shapes shapes/contract.yaml --no-verify --warmup 300 --csv $r/bench-contract-9954cfb.csv --force
st 20 bench-compare-9954cfb $b/kda-bench compare $r/bench-contract-9954cfb.csv $r/bench-contract.csv
st 70 stages $b/kda-bench --shapes shapes/contract.yaml --only h96-fixed h64-fixed --paths fused,explicit --stages --no-verify --warmup 300 --md $r/stages.md --csv $r/stages.csv --force
st 130 check-contract $b/kda-check --shapes shapes/contract.yaml --md $r/check-contract.md --csv $r/check-contract.csv --force
tar -C $OUT -czf $OUT/r.tar.gz r
