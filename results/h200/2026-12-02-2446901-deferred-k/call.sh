# Device call 1 of 2026-12-02 (session 27): three earlier builds' raw path against 2446901 (raw k's
# deferred norm), GPU tests, kda-check of the raw path, sanitizers on the raw-input tests.
#   f097903   = d95c5ef's binaries (lib/kda = f097903, the last measured kernels)
#   rawkgroup = 05c1f5f (8b24130 re-applied: raw k in its own early cp.async group)
#   scalars   = 4c07282 (729162c re-applied on it: beta and the channel parameters read first)
#   new       = 2446901 (raw k's norm deferred)
# run(carry=[".device/new"]):
export NEW=.device/new/bin BASES="f097903=.device/new/bin/kda-bench-f097903 rawkgroup=.device/new/bin/kda-bench-rawkgroup scalars=.device/new/bin/kda-bench-scalars" PATHS_f097903=raw PATHS_rawkgroup=raw PATHS_scalars=raw CHECKS="smoke edge edge:raw long-memory:raw contract-mixed:raw contract:raw long-memory" DEADLINE=450; bash scripts/h200-ab.sh; for t in racecheck memcheck synccheck; do s=$SECONDS; timeout 45 compute-sanitizer --tool $t --error-exitcode 9 $NEW/test_kda_gpu --gtest_brief=1 --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*' > $OUT/san-$t-raw.log 2>&1; echo "san-$t-raw rc=$? $((SECONDS-s))s" | tee -a $OUT/san-summary.txt; done
