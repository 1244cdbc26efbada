# The device call that produced this folder: binaries of 5936e5d in .device/new/bin; .device/base/kda-bench
# = this tree's harness with lib/kda/src of 3aaa6a8 (the kernels before the long-memory work; lib/kda/include
# is unchanged since), built in a worktree (git checkout 3aaa6a8 -- lib/kda/src), so it can time contract-mixed.
BIN=.device/new/bin BASE_BIN=.device/base BASE_FILES="contract contract-mixed" VARIANTS=v2w_mma \
  CHECK_ARGS="--rms-limit 4e-3" ALLMODES=0 GBENCH=0 BENCH_ARGS="--warmup 300" \
  SAN_TOOLS="memcheck racecheck synccheck" SANITIZE_SHAPES=smoke SAN_TESTS=0 DEADLINE=570 scripts/h200-run.sh full
