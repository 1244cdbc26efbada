#!/usr/bin/env bash
# kda-lab-factors16 with fused16 round 2 (353c2bb: the conflict-free phase 2, the builders loading ahead): the checks (every
# factor, the two-kernel forward against float64, fused16 with one and two builders, with and without delayed hand-overs, bit for bit
# against it), memcheck, racecheck, synccheck, the timing beside the library's forward in both gate
# regimes, and Nsight Compute (source counters) of both fused16 kernels on h96-uniform8.
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-420}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from $(binary_commit $B/kda-lab-factors16 || echo 353c2bb)"
step 60 check $B/kda-lab-factors16 --check-only
step 90 memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 synccheck compute-sanitizer --tool synccheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 150 time $B/kda-lab-factors16 --time-only
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
step 90 ncu ncu --clock-control none -k "regex:fused16_kernel" -c 2 --set full --import-source yes \
  -o "$r/fused16" $B/kda-lab-factors16 --time-only --only h96-uniform8 --contract-only --warmup 0 --runs 1
step 30 ncu-source bash -c "ncu -i '$r/fused16.ncu-rep' --page source --csv --print-source sass | gzip > '$r/ncu-source.csv.gz'"
step 30 ncu-details ncu -i "$r/fused16.ncu-rep" --page details
rm -f "$r/fused16.ncu-rep"
finish
