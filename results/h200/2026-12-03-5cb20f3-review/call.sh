#!/usr/bin/env bash
# kda-lab-factors16 after the review (5cb20f3: factors16 on prep_chunk.cuh's load / pack helpers,
# shared wgmma wrapper): the checks (every factor and the whole 16-token forward against float64,
# three gate regimes), memcheck, racecheck, synccheck and the timing beside the library's forward.
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-300}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from 5cb20f3"
step 60 check $B/kda-lab-factors16 --check-only
step 90 memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 racecheck compute-sanitizer --tool racecheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 90 synccheck compute-sanitizer --tool synccheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 120 time $B/kda-lab-factors16 --time-only
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
