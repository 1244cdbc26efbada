#!/usr/bin/env bash
# call 4 of session 11: v2w.2 + PREP v2.7 (snapI) checked and timed against v2w (b467a69, snapG) in one call
set -uo pipefail
b=build/snapI; r=$OUT/r; mkdir -p $r
S=$OUT/summary.txt
st() { local lim=$1 n=$2; shift 2; (( SECONDS + 20 > 560 )) && { echo "$n skipped" | tee -a $S; return; }; (( SECONDS + lim > 560 )) && lim=$((560-SECONDS)); local t0=$SECONDS; timeout $lim "$@" > $r/$n.log 2>&1; local rc=$?; echo "$n rc=$rc $((SECONDS-t0))s" | tee -a $S; return $rc; }
{ strings $b/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; } > $r/machine.txt 2>&1
st 150 test_kda_gpu $b/test_kda_gpu --gtest_brief=1 
for s in smoke edge; do
  st 120 check-$s-v2w $b/kda-check --variant v2w_mma --shapes shapes/$s.yaml --md $r/check-$s-v2w.md --csv $r/check-$s-v2w.csv --force
done
st 150 san-racecheck-smoke-v2w compute-sanitizer --tool racecheck --error-exitcode 9 $b/kda-check --variant v2w_mma --shapes shapes/smoke.yaml
st 150 bench-v2w-b467a69 build/snapG/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --csv $r/bench-v2w-b467a69.csv --force
st 150 bench-new $b/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-new.md --csv $r/bench-new.csv --force
st 150 bench-v2w-b467a69-again build/snapG/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --csv $r/bench-v2w-b467a69-again.csv --force
st 30 compare $b/kda-bench compare $r/bench-v2w-b467a69.csv $r/bench-new.csv
st 30 compare-again $b/kda-bench compare $r/bench-v2w-b467a69-again.csv $r/bench-new.csv
st 120 stages-new $b/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --only h96-fixed h64-uniform8 --paths fused --stages --no-verify --md $r/stages-new.md --csv $r/stages-new.csv --force
tar -C $OUT -czf $OUT/r.tar.gz r
