#!/usr/bin/env bash
# kda-lab-factors16 after the review (74cba06: the two-slot launch removed, the timing columns per
# builder count; fused16's SASS identical to 38112ce's): the checks in three gate regimes
# (fused16 bit for bit the two-kernel forward, delays included), memcheck, and the timing.
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-120}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from 74cba06"
step 30 check $B/kda-lab-factors16 --check-only
step 40 memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-lab-factors16 --check-only
step 40 time $B/kda-lab-factors16 --time-only
finish
