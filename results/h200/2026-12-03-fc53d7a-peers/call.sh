#!/usr/bin/env bash
# Every Hopper peer beside ours (fc53d7a's binaries: a8bae34's kernels, main's default) in one
# device call, FLA left out (FLA=0), the FlashKDA build caches of the previous peers call carried:
#   run(command="bash results/h200/2026-12-03-fc53d7a-peers/call.sh",
#       carry=[".whl", ".peers", ".device/peer", ".peers-cache"], timeout_s=600)
FLA=0 BIN=.device/peer/bin bash scripts/peers/run-all-h200.sh
