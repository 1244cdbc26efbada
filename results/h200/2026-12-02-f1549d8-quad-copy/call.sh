#!/usr/bin/env bash
# Session 26 call 1: f1549d8's quad-adjacent raw k copy (issue 16) verified and timed against
# 38c228f's kernels (a993cb1 binaries) in the same call. Deadline inside.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$r/summary.txt; : > $S
DL=${DEADLINE:-420}
step() { local lim=$1 name=$2; shift 2
  (( SECONDS + lim > DL )) && lim=$(( DL - SECONDS )); (( lim < 5 )) && { echo "$name skipped (deadline)" >> $S; return; }
  local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$') (base: $(strings $B/kda-bench-base | grep -m1 -E '^[0-9a-f]{40}'))"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $r/machine.txt 2>&1
head -1 $r/machine.txt >> $S
for t in test_kda_gpu test_bench_gpu test_kda_validate; do step 60 $t $B/$t --gtest_brief=1; done
for f in contract contract-mixed; do
  for v in base new base2 new2; do
    bin=$B/kda-bench; [[ $v == base* ]] && bin=$B/kda-bench-base
    [[ $f == contract-mixed && $v == *2 ]] && continue
    step 60 bench-$f-$v $bin --shapes shapes/$f.yaml --no-verify --paths fused,raw --csv $r/bench-$f-$v.csv --md $r/bench-$f-$v.md --force
  done
  step 10 compare-$f $B/kda-bench compare $r/bench-$f-base.csv $r/bench-$f-new.csv --mode warm --md $r/compare-$f.md --force
done
step 10 compare-contract-2 $B/kda-bench compare $r/bench-contract-base2.csv $r/bench-contract-new2.csv --mode warm --md $r/compare-contract-2.md --force
for s in smoke edge long-memory; do
  step 60 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --force
done
step 60 check-edge-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/edge.yaml --md $r/check-edge-raw.md --csv $r/check-edge-raw.csv --force
for tool in memcheck racecheck synccheck; do
  step 40 san-$tool-raw compute-sanitizer --tool $tool --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*'
done
step 100 check-contract-mixed-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/contract-mixed.yaml --md $r/check-contract-mixed-raw.md --csv $r/check-contract-mixed-raw.csv --force
grep -h "geomean\|rows:" $r/compare-*.md $r/check-*.md 2>/dev/null | head -40 >> $S
tar -C $OUT -czf $OUT/h200.tar.gz r; cat $S; rm -rf $r
