#!/usr/bin/env bash
# call 2 of session 11: first GPU run of v2w_mma (wgmma scan); v2_mma's per-call scan choice
set -uo pipefail
b=build/snapG; r=$OUT/r; mkdir -p $r
S=$OUT/summary.txt
st() { local lim=$1 n=$2; shift 2; (( SECONDS + 20 > 560 )) && { echo "$n skipped" | tee -a $S; return; }; (( SECONDS + lim > 560 )) && lim=$((560-SECONDS)); local t0=$SECONDS; timeout $lim "$@" > $r/$n.log 2>&1; local rc=$?; echo "$n rc=$rc $((SECONDS-t0))s" | tee -a $S; return $rc; }
{ strings $b/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; } > $r/machine.txt 2>&1
st 150 test_kda_gpu $b/test_kda_gpu --gtest_brief=1
ok=1
for s in smoke edge; do
  st 120 check-$s-v2w $b/kda-check --variant v2w_mma --shapes shapes/$s.yaml --md $r/check-$s-v2w.md --csv $r/check-$s-v2w.csv --force || ok=0
done
st 100 san-memcheck-smoke-v2w compute-sanitizer --tool memcheck --error-exitcode 9 $b/kda-check --variant v2w_mma --shapes shapes/smoke.yaml
st 150 san-racecheck-smoke-v2w compute-sanitizer --tool racecheck --error-exitcode 9 $b/kda-check --variant v2w_mma --shapes shapes/smoke.yaml
st 150 bench-v2 $b/kda-bench --variant v2_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-v2.md --csv $r/bench-v2.csv --force
if [[ $ok == 1 ]]; then
  st 150 bench-v2w $b/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-v2w.md --csv $r/bench-v2w.csv --force
  st 30 compare $b/kda-bench compare $r/bench-v2.csv $r/bench-v2w.csv
  st 150 stages-v2w $b/kda-bench --variant v2w_mma --shapes shapes/contract.yaml --paths fused --stages --no-verify --md $r/stages-v2w.md --csv $r/stages-v2w.csv --force
fi
tar -C $OUT -czf $OUT/r.tar.gz r
cp $r/check-smoke-v2w.md $OUT/ 2>/dev/null
