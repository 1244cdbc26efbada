# The device call that produced this folder (binaries of 9631436 in .device/new; scripts/peers at 9631436):
BIN=.device/new/bin LIBKDA=.device/new/lib/libkda.a DEADLINE=560 bash scripts/peers/run-all-h200.sh
# carry: .device .whl .peers (no .peers-cache: first call on this machine)
