#!/usr/bin/env bash
# Session 26 call 4: d4e6853 (lib/kda = f097903's kernels, SASS identical) on contract-mixed in
# kda-check (issue 14's remaining check for the kept kernels) and kda-bench against 3aaa6a8's
# kernels (kda-bench-3a) once more in both gate regimes. Deadline inside.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$r/summary.txt; : > $S
DL=${DEADLINE:-330}
step() { local lim=$1 name=$2; shift 2
  (( SECONDS + lim > DL )) && lim=$(( DL - SECONDS )); (( lim < 5 )) && { echo "$name skipped (deadline)" >> $S; return; }
  local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
ver() { strings $1 | grep -m1 -E '^[0-9a-f]{40}'; }
{ echo "binaries: $(ver $B/kda-check) (bench: $(ver $B/kda-bench); 3a: $(ver $B/kda-bench-3a) with lib/kda/src of 3aaa6a8)"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $r/machine.txt 2>&1
cat $r/machine.txt >> $S
step 30 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
for f in contract contract-mixed; do
  step 60 bench-$f-3a $B/kda-bench-3a --shapes shapes/$f.yaml --no-verify --paths fused,explicit --csv $r/bench-$f-3a.csv --md $r/bench-$f-3a.md --force
  step 60 bench-$f-new $B/kda-bench --shapes shapes/$f.yaml --no-verify --paths fused,raw,explicit --csv $r/bench-$f-new.csv --md $r/bench-$f-new.md --force
  step 10 compare-$f-vs-3a $B/kda-bench compare $r/bench-$f-3a.csv $r/bench-$f-new.csv --mode warm --md $r/compare-$f-vs-3a.md --force
done
step 150 check-contract-mixed $B/kda-check --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml --md $r/check-contract-mixed.md --csv $r/check-contract-mixed.csv --force
grep -h "geomean\|rows:" $r/compare-*.md $r/check-*.md 2>/dev/null | head -40 >> $S
tar -C $OUT -czf $OUT/h200.tar.gz r; cat $S; rm -rf $r
