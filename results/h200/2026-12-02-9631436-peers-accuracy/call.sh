# The device call that produced this folder (binaries of 9631436 in .device/new; scripts/peers at 055cd59: the dump check fixed, TIMING=0):
TIMING=0 FLA=1 DEADLINE=225 CHECKS_DONE=200 BUILD_WAIT=150 BIN=.device/new/bin LIBKDA=.device/new/lib/libkda.a bash scripts/peers/run-all-h200.sh
# carry: .device .whl .peers .peers-cache (the build caches were not found: fixed in 7cd1786)
