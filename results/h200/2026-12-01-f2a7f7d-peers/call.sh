# The device call that produced this folder (tree at 37b7d53 = f2a7f7d's lib/kda + the peers branch; binaries
# and libkda.a of f2a7f7d in .device/new; .whl = nvidia-cudnn-frontend 1.32.0 and fla_core 0.6.0 wheels;
# .peers = ../shared/peers/flashkda-src.tar.gz and flashkda-forks.tar.gz). The report's "commit:" line reads
# ca129ee because the device copy carries no .git history of the merge; the binaries are f2a7f7d's.
BIN=.device/new/bin LIBKDA=.device/new/lib/libkda.a DEADLINE=560 bash scripts/peers/run-all-h200.sh
