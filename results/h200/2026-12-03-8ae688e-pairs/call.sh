#!/usr/bin/env bash
# Round 5 (one or two sub-chunks per CTA) of kda-lab-factors16 with the 16-token chain (kda-lab-factors16, 8ae688e): the
# checks of every factor and of the whole 16-token forward against the float64 reference (three
# gate regimes), memcheck and racecheck of them, the timing against the library's forward and
# PREP (contract and long-memory gates), and Nsight Compute of one h96-fixed launch of each
# kernel (factors16 on chip, factors16 with records, the chain; the order of the tool's round).
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-420}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from 8ae688e"
step 60 check $B/kda-lab-factors16 --check-only
step 90 memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 synccheck compute-sanitizer --tool synccheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 120 time $B/kda-lab-factors16 --time-only
step 120 ncu ncu --clock-control none -k "regex:factors16_kernel|chain_kernel" -c 4 --set full --import-source yes \
  -o "$r/f16" $B/kda-lab-factors16 --time-only --only h96-fixed --contract-only --warmup 0 --runs 1
step 30 ncu-details ncu -i "$r/f16.ncu-rep" --page details
step 30 ncu-source bash -c "ncu -i '$r/f16.ncu-rep' --page source --csv --print-source sass | gzip > '$r/ncu-source.csv.gz'"
rm -f "$r/f16.ncu-rep"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
