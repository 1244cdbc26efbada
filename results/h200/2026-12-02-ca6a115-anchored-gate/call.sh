# Call 1 (2026-12-02, session 28): ca6a115 (anchored gate, kernels in two copies) against 46be186 and 64fbfda (v1: predicated below-diagonal factors). .device/new/bin: ca6a115 builds; kda-bench-46be186; kda-bench-v1 = 64fbfda. (Its ablation part ran kda-bench-aball, a typo: see call 2.)
# Call 2 below: the MUFU ablation (46be186 + one-line patches removing the ex2 of phase 2, the grams, or all three with 4a; timing only, results wrong by construction), twice.
set -u
export NEW=.device/new/bin BASES="b46be186=.device/new/bin/kda-bench-46be186 v1=.device/new/bin/kda-bench-v1" PATHS=fused,raw FILES="contract contract-mixed" CHECKS="smoke edge edge:raw long-memory long-memory:raw contract contract:raw contract-mixed:raw" DEADLINE=470
bash scripts/h200-ab.sh
a=$OUT/abl; mkdir -p $a
for b in 46be186 aball ablgram; do
  $NEW/kda-bench-$b --shapes shapes/contract.yaml --no-verify --paths fused --csv $a/bench-$b.csv --md $a/bench-$b.md --force -q > $a/bench-$b.log 2>&1; echo "abl $b rc=$?" >> $a/summary.txt
done
for b in aball ablgram; do $NEW/kda-bench compare $a/bench-46be186.csv $a/bench-$b.csv --mode warm --md $a/compare-$b.md --force > /dev/null 2>&1; done
grep -h geomean $a/compare-*.md
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*GateCumsum*:*PackedWithEmptySequence/v2w_mma*' > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?" >> $OUT/racecheck.txt; tail -2 $OUT/racecheck.txt
set -u
a=$OUT/abl; mkdir -p $a
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $a/machine.txt
for round in 1 2; do
for b in 46be186 ablall ablp2 ablgram; do
  .device/abl/kda-bench-$b --shapes shapes/contract.yaml --no-verify --paths fused --csv $a/bench-$b-$round.csv --md $a/bench-$b-$round.md --force -q > $a/bench-$b-$round.log 2>&1; echo "abl $b $round rc=$?" >> $a/summary.txt
done
for b in ablall ablp2 ablgram; do .device/abl/kda-bench-46be186 compare $a/bench-46be186-$round.csv $a/bench-$b-$round.csv --mode warm --md $a/compare-$b-$round.md --force > /dev/null 2>&1; done
done
cd $OUT && tar czf abl.tar.gz abl && rm -rf abl
