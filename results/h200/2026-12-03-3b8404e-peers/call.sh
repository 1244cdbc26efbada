#!/usr/bin/env bash
# Every Hopper peer beside ours (3b8404e's binaries: f06b1cc's kernels) in one device call, FLA
# left out (FLA=0), no build caches carried (scripts/peers/README.md "Preparing the carry"):
#   run(command="FLA=0 BIN=.device/peer/bin bash scripts/peers/run-all-h200.sh",
#       carry=[".whl", ".peers", ".device/peer"], timeout_s=600)
FLA=0 BIN=.device/peer/bin bash scripts/peers/run-all-h200.sh
