# The device call that produced this folder (binaries of b4a9970 in .device/new, 3aaa6a8's
# kda-bench in .device/base, both built on the development machine):
BIN=.device/new BASE_BIN=.device/base VARIANTS=v2w_mma CHECK_ARGS="--rms-limit 4e-3" ALLMODES=0 \
  GBENCH=0 BENCH_ARGS="--warmup 300" SAN_TOOLS="memcheck racecheck synccheck" SANITIZE_SHAPES=smoke \
  SAN_TESTS=0 DEADLINE=575 scripts/h200-run.sh full
