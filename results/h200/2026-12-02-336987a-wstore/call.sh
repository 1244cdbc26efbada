#!/usr/bin/env bash
# Session 26 call 3: 336987a (W stored without the unit multiply, issue 14) verified and timed in one
# call against f097903 (kda-bench-base) and 3aaa6a8's kernels (kda-bench-3a: f2a7f7d's harness with
# lib/kda/src of 3aaa6a8); two ablations of f097903's raw path (timing only: no sigmoid; no k norm). Deadline inside.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$r/summary.txt; : > $S
DL=${DEADLINE:-530}
step() { local lim=$1 name=$2; shift 2
  (( SECONDS + lim > DL )) && lim=$(( DL - SECONDS )); (( lim < 5 )) && { echo "$name skipped (deadline)" >> $S; return; }
  local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
ver() { strings $1 | grep -m1 -E '^[0-9a-f]{40}'; }
{ echo "binaries: $(ver $B/kda-check) (base: $(ver $B/kda-bench-base); 3a: $(ver $B/kda-bench-3a) with lib/kda/src of 3aaa6a8; ablations: $(ver $B/kda-bench-abl-gate) $(ver $B/kda-bench-abl-knorm))"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $r/machine.txt 2>&1
cat $r/machine.txt >> $S
for t in test_kda_gpu; do step 60 $t $B/$t --gtest_brief=1; done
bench() { local f=$1 v=$2 bin=$B/kda-bench paths=fused,raw,explicit
  case $v in base*) bin=$B/kda-bench-base;; 3a*) bin=$B/kda-bench-3a; paths=fused,explicit;;
    abl-*) bin=$B/kda-bench-$v; paths=raw;; esac
  step 60 bench-$f-$v $bin --shapes shapes/$f.yaml --no-verify --paths $paths --csv $r/bench-$f-$v.csv --md $r/bench-$f-$v.md --force; }
for v in 3a base new abl-gate abl-knorm 3a2 new2 base2; do bench contract $v; done
for v in 3a base new; do bench contract-mixed $v; done
cmp() { step 10 compare-$1 $B/kda-bench compare $r/bench-$2.csv $r/bench-$3.csv --mode warm --md $r/compare-$1.md --force; }
cmp contract-vs-base contract-base contract-new; cmp contract-vs-base-2 contract-base2 contract-new2
cmp contract-vs-3a contract-3a contract-new; cmp contract-vs-3a-2 contract-3a2 contract-new2
cmp contract-mixed-vs-base contract-mixed-base contract-mixed-new; cmp contract-mixed-vs-3a contract-mixed-3a contract-mixed-new
cmp abl-gate contract-base contract-abl-gate; cmp abl-knorm contract-base contract-abl-knorm
for s in smoke edge long-memory; do
  step 60 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --force
done
step 60 check-edge-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/edge.yaml --md $r/check-edge-raw.md --csv $r/check-edge-raw.csv --force
step 40 san-racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*'
step 150 check-contract-mixed $B/kda-check --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml --md $r/check-contract-mixed.md --csv $r/check-contract-mixed.csv --force
step 150 check-contract $B/kda-check --rms-limit 4e-3 --shapes shapes/contract.yaml --md $r/check-contract.md --csv $r/check-contract.csv --force
grep -h "geomean\|rows:" $r/compare-*.md $r/check-*.md 2>/dev/null | head -40 >> $S
tar -C $OUT -czf $OUT/h200.tar.gz r; cat $S; rm -rf $r
