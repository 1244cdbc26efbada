# One device call (2026-12-02, session 28): 46be186's kda-bench against a launch-only probe of it (prep.cu: 150 KB of dynamic shared memory for both PREP kernels, so one CTA per SM; kernels unchanged), fused path with --stages, --no-verify.
set -u
a=$OUT/o1; mkdir -p $a; B=.device/o1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $a/machine.txt
for b in base O1; do
  t0=$SECONDS; $B/kda-bench-$b --shapes shapes/contract.yaml --no-verify --paths fused --stages --csv $a/bench-$b.csv --md $a/bench-$b.md --force -q > $a/bench-$b.log 2>&1; echo "bench-$b rc=$? $((SECONDS-t0))s" >> $a/summary.txt
done
$B/kda-bench-base compare $a/bench-base.csv $a/bench-O1.csv --mode warm --md $a/compare-O1.md --force > /dev/null 2>&1
cat $a/summary.txt; grep -v '^$' $a/compare-O1.md | sed -n 5,40p
cd $OUT && tar czf o1.tar.gz o1 && rm -rf o1
