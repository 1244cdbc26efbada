#!/usr/bin/env bash
# call 1 of session 11: first GPU run of v2t_mma + issue-7 ops sanitizer
set -uo pipefail
b=build/snapF; r=$OUT/r; mkdir -p $r
S=$OUT/summary.txt
st() { local lim=$1 n=$2; shift 2; (( SECONDS + 20 > 560 )) && { echo "$n skipped" | tee -a $S; return; }; (( SECONDS + lim > 560 )) && lim=$((560-SECONDS)); local t0=$SECONDS; timeout $lim "$@" > $r/$n.log 2>&1; echo "$n rc=$? $((SECONDS-t0))s" | tee -a $S; }
{ strings $b/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; } > $r/machine.txt 2>&1
st 150 test_kda_gpu $b/test_kda_gpu --gtest_brief=1
st 60 test_bench_gpu $b/test_bench_gpu --gtest_brief=1
for s in smoke edge; do
  st 120 check-$s-v2t $b/kda-check --variant v2t_mma --shapes shapes/$s.yaml --md $r/check-$s-v2t.md --csv $r/check-$s-v2t.csv --force
done
for tool in memcheck racecheck initcheck synccheck; do
  st 120 san-$tool-ops compute-sanitizer --tool $tool --error-exitcode 9 $b/test_kda_gpu --gtest_brief=1 --gtest_filter='KdaGpu.GateCumsum*:KdaGpu.L2Norm*'
done
st 100 san-memcheck-smoke-v2t compute-sanitizer --tool memcheck --error-exitcode 9 $b/kda-check --variant v2t_mma --shapes shapes/smoke.yaml
st 150 san-racecheck-smoke-v2t compute-sanitizer --tool racecheck --error-exitcode 9 $b/kda-check --variant v2t_mma --shapes shapes/smoke.yaml
st 150 bench-v2 $b/kda-bench --variant v2_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-v2.md --csv $r/bench-v2.csv --force
st 150 bench-v2t $b/kda-bench --variant v2t_mma --shapes shapes/contract.yaml --no-verify --warmup 300 --md $r/bench-v2t.md --csv $r/bench-v2t.csv --force
st 30 compare $b/kda-bench compare $r/bench-v2.csv $r/bench-v2t.csv
st 150 stages-v2t $b/kda-bench --variant v2t_mma --shapes shapes/contract.yaml --only h96-fixed h64-uniform8 h96-ragged6 --paths fused --stages --no-verify --md $r/stages-v2t.md --csv $r/stages-v2t.csv --force
tar -C $OUT -czf $OUT/r.tar.gz r
cp $r/bench-v2t.md $r/check-smoke-v2t.md $OUT/ 2>/dev/null
