# The device call that produced this folder (binaries of ac6caaf in .device/new, 3aaa6a8's kda-bench
# in .device/base; side_by_side built from ../shared/peers with the cuDNN-FE 1.32.0 wheel's
# kda_fused_sm90.cu and ac6caaf's libkda.a, carried in .device/peers):
mkdir -p $OUT/r; timeout 60 .device/peers/side_by_side 20 100 > $OUT/r/peers-side-by-side.csv
BIN=.device/new BASE_BIN=.device/base VARIANTS=v2w_mma CHECK_ARGS="--rms-limit 4e-3" ALLMODES=0 \
  GBENCH=0 BENCH_ARGS="--warmup 300" SAN_TOOLS="memcheck racecheck synccheck" SANITIZE_SHAPES=smoke \
  SAN_TESTS=0 DEADLINE=525 scripts/h200-run.sh full
