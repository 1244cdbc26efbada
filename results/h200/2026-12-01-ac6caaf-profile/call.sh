KEEP_REPORTS=0 TAG=new BIN=.device/new scripts/h200-profile.sh h96-fixed; KEEP_REPORTS=0 TAG=base BIN=.device/base scripts/h200-profile.sh h96-fixed   # new = ac6caaf, base = 3aaa6a8
