#!/usr/bin/env bash
# Stages binaries for a device call (the device tool copies the working tree plus the paths named
# in `carry`, 64 MiB in all): build/release's tools into .device/<NAME>/{bin,lib}, stripped (the
# static binaries lose ~15 % of their size, the embedded commit stays: scripts/device-steps.sh
# binary_commit reads it), then prints what the carry will cost against the 64 MiB.
#   scripts/stage-device.sh [NAME] [BINARY...]
#     NAME       .device/NAME (default new)
#     BINARY...  names in build/release/bin (default: kda-check kda-bench test_kda_gpu); libkda_c.so
#                (build/release/lib) always comes along, for ours through kda_torch in the peers
#   BUILD=DIR    another build tree (e.g. a worktree of an earlier commit: an A/B baseline)
# Exits 2 with a message when a binary is missing (build first: cmake --build --preset release).
set -euo pipefail
name=${1:-new}
shift || true
build=${BUILD:-build/release}
bins=("$@")
(( ${#bins[@]} > 0 )) || bins=(kda-check kda-bench test_kda_gpu)
if [[ $name == */* || $name == . || $name == .. || -z $name ]]; then
  echo "$0: NAME must be a plain folder name under .device/, got '$name'" >&2
  exit 2
fi
for b in "${bins[@]}"; do
  [[ -x $build/bin/$b ]] || { echo "$0: $build/bin/$b is missing: build it first (cmake --build --preset release)" >&2; exit 2; }
done
dest=.device/$name
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
for b in "${bins[@]}"; do
  cp "$build/bin/$b" "$dest/bin/"
  strip "$dest/bin/$b"
done
if [[ -f $build/lib/libkda_c.so ]]; then
  cp "$build/lib/libkda_c.so" "$dest/lib/"
  strip --strip-unneeded "$dest/lib/libkda_c.so"
fi
commit=$(strings "$dest/bin/${bins[0]}" | grep -E '^[0-9a-f]{40}(-dirty)?$' | sed -n 1p || true)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f 1)
staged=$(du -sb "$dest" | cut -f 1)
echo "staged $dest ($(( staged / 1048576 )) MiB) from $build, commit ${commit:-unknown}"
echo "tracked tree $(( tree / 1048576 )) MiB; with every .device/* and .whl staged now: $(( ( tree + $(du -sbc .device .whl 2>/dev/null | tail -n 1 | cut -f 1) ) / 1048576 )) MiB of the 64 MiB"
