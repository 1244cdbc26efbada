# One device call (2026-12-02, session 28): two one-change builds of 46be186 (lib/kda/src/prep/prep_chunk.cuh; probe-X.diff, probe-Y.diff) against 46be186 itself, kda-bench --no-verify; Y checked by its own kda-check, GPU tests and racecheck.
set -u
a=$OUT/xy; mkdir -p $a; B=.device/xy
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $a/machine.txt
st() { local n=$1; shift; local t0=$SECONDS; "$@" > $a/$n.log 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> $a/summary.txt; }
st test-Y $B/test_kda_gpu-Y --gtest_brief=1
for round in 1 2; do
  st bench-base-$round $B/kda-bench-base --shapes shapes/contract.yaml --no-verify --paths fused,raw --csv $a/bench-base-$round.csv --force -q
  st bench-X-$round $B/kda-bench-X --shapes shapes/contract.yaml --no-verify --paths fused --csv $a/bench-X-$round.csv --force -q
  st bench-Y-$round $B/kda-bench-Y --shapes shapes/contract.yaml --no-verify --paths raw --csv $a/bench-Y-$round.csv --force -q
  for v in X Y; do $B/kda-bench-base compare $a/bench-base-$round.csv $a/bench-$v-$round.csv --mode warm --md $a/compare-$v-$round.md --force > /dev/null 2>&1; done
done
st bench-base-mixed $B/kda-bench-base --shapes shapes/contract-mixed.yaml --no-verify --paths raw --csv $a/bench-base-mixed.csv --force -q
st bench-Y-mixed $B/kda-bench-Y --shapes shapes/contract-mixed.yaml --no-verify --paths raw --csv $a/bench-Y-mixed.csv --force -q
$B/kda-bench-base compare $a/bench-base-mixed.csv $a/bench-Y-mixed.csv --mode warm --md $a/compare-Y-mixed.md --force > /dev/null 2>&1
for c in edge long-memory smoke contract-mixed; do st check-Y-$c-raw $B/kda-check-Y --rms-limit 4e-3 --backend raw --shapes shapes/$c.yaml --md $a/check-Y-$c-raw.md --force; done
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_kda_gpu-Y --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*' > $a/racecheck-Y.txt 2>&1; echo "racecheck rc=$?" >> $a/summary.txt
cat $a/summary.txt; grep -h geomean $a/compare-*.md
cd $OUT && tar czf xy.tar.gz xy && rm -rf xy
