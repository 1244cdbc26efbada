#!/usr/bin/env bash
# Stages everything scripts/h200-next-call.sh carries, on a fresh checkout (~15 min on 2 cores):
#   .device/new    this tree's kda-check, kda-bench, test_kda_gpu, libkda_c.so (stage-device.sh)
#   .device/base   kda-bench of 06a483c (before the fifth session's builder changes) and of
#                  20f7744 (the raw prologue alone), stripped and xz-compressed, for the A/B
#   .device/lab    kda-lab-factors16 (the L2 helpers' stress runs), stripped and xz-compressed
#   .whl           the cuDNN frontend wheel for the peers (PART=2)
# Usage: scripts/stage-next-call.sh [--skip-baselines]
# The baselines build in git worktrees under ../stage-base-<commit> (kept: a second run reuses
# them). Exits non-zero at the first failing step, saying which.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
skip_baselines=0
for arg in "$@"; do
  case $arg in
    --skip-baselines) skip_baselines=1 ;;
    *) echo "$0: unknown argument '$arg' (only --skip-baselines)" >&2; exit 2 ;;
  esac
done
step() { echo "== $*" >&2; }

step "this tree: configure and build (release preset)"
[[ -f build/release/CMakeCache.txt ]] || cmake --preset release > /dev/null
cmake --build --preset release -j "$(nproc)"
scripts/stage-device.sh new

step "kda-lab-factors16 -> .device/lab"
mkdir -p .device/lab
strip -o /tmp/kda-lab-factors16.stripped build/release/bin/kda-lab-factors16
xz -9 -c /tmp/kda-lab-factors16.stripped > .device/lab/kda-lab-factors16.xz

if [[ $skip_baselines == 0 ]]; then
  mkdir -p .device/base
  for pair in 06a483c:kda-bench.xz 20f7744:kda-bench-mid.xz; do
    commit=${pair%%:*} out=${pair##*:}
    tree=../stage-base-$commit
    step "baseline $commit -> .device/base/$out"
    [[ -d $tree ]] || git worktree add -f "$tree" "$commit" > /dev/null
    (cd "$tree" && { [[ -f build/release/CMakeCache.txt ]] || cmake --preset release > /dev/null; } &&
      cmake --build --preset release -j "$(nproc)" --target kda-bench > /dev/null)
    strip -o "/tmp/kda-bench-$commit" "$tree/build/release/bin/kda-bench"
    xz -9 -c "/tmp/kda-bench-$commit" > ".device/base/$out"
  done
fi

step "the cuDNN frontend wheel -> .whl"
if ! ls .whl/nvidia_cudnn_frontend-1.32.0-*.whl > /dev/null 2>&1; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d .whl nvidia-cudnn-frontend==1.32.0
fi
du -sh .device/* .whl >&2
echo "staged: run(command=\"bash scripts/h200-next-call.sh\", carry=[\".device/new\", \".device/base\", \".device/lab\"]), then PART=2 with carry [\".device/new\", \".whl\"]" >&2
