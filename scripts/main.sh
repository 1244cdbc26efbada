#!/usr/bin/env bash
# The main job: build (release preset), then validate and time the six frozen contract shapes.
# On a machine with an H100/H200 this runs kda-check (fused and explicit paths vs the CPU float64
# reference) and kda-bench; without a GPU it checks the CPU references and says so.
# Reports go to results/local/ (ignored by git); pass another directory as $1.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/local}
mkdir -p "$out"
cmake --preset release >/dev/null
cmake --build --preset release
bin=build/release/bin
shapes=shapes/contract.yaml
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$bin/kda-check" --shapes "$shapes" --md "$out/check-contract.md" --csv "$out/check-contract.csv" \
    --json "$out/check-contract.json" --force
  "$bin/kda-bench" --shapes "$shapes" --md "$out/bench-contract.md" --csv "$out/bench-contract.csv" \
    --json "$out/bench-contract.json" --force
else
  echo "main: no NVIDIA GPU here: checking the CPU references on the contract shapes instead" >&2
  "$bin/kda-check" --backend reference --shapes "$shapes" --md "$out/check-reference.md" \
    --csv "$out/check-reference.csv" --force
fi
