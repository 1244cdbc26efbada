#!/usr/bin/env bash
# kda-lab-factors16 round 6 (d4d1d61: the three builders' next rows into L2): the checks (every factor, the
# two-kernel forward against float64, fused16 bit for bit against it with and without delayed
# hand-overs), memcheck, synccheck, the timing beside the library's forward in both gate regimes,
# Nsight Compute of the three fused16 kernels on h96-uniform8.
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-300}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from d4d1d61"
step 60 check $B/kda-lab-factors16 --check-only
step 90 memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 synccheck compute-sanitizer --tool synccheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 150 time $B/kda-lab-factors16 --time-only
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
step 90 ncu ncu --clock-control none -k "regex:fused16_kernel" -c 3 --set full --import-source yes \
  -o "$r/f16" $B/kda-lab-factors16 --time-only --only h96-uniform8 --contract-only --warmup 0 --runs 1
step 30 ncu-source bash -c "ncu -i '$r/f16.ncu-rep' --page source --csv --print-source sass | gzip > '$r/ncu-source.csv.gz'"
step 30 ncu-details ncu -i "$r/f16.ncu-rep" --page details
rm -f "$r/f16.ncu-rep"
finish
