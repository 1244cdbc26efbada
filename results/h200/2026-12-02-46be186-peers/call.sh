# Device call 4 of 2026-12-02 (session 27; call 3 got no machine): every Hopper peer next to ours
# at 46be186 (raw k's deferred norm), FLA left out (FLA=0: not needed for the raw-input issue and
# the longest step without a Triton cache). No caches carried: FlashKDA and both forks built here.
# .device/peer = kda-check, kda-bench, lib/libkda_c.so of 46be186.
# run(carry=[".whl", ".peers", ".device/peer"]):
FLA=0 BIN=.device/peer/bin bash scripts/peers/run-all-h200.sh
