# One device call (2026-12-02, session 28): 727ff19 (two sigmoids per reciprocal) against 46be186's raw path.
# .device/new/bin: kda-bench / kda-check / test_kda_gpu built at 727ff19, kda-bench-46be186 built at 46be186.
export NEW=.device/new/bin BASES="b46be186=.device/new/bin/kda-bench-46be186" PATHS_b46be186=raw PATHS=fused,raw FILES="contract contract-mixed" CHECKS="smoke edge edge:raw long-memory:raw contract-mixed:raw contract:raw long-memory" DEADLINE=450; bash scripts/h200-ab.sh
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $NEW/test_kda_gpu --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*:*GateCumsum*' > $OUT/racecheck.txt 2>&1
