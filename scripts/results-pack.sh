#!/usr/bin/env bash
# Keeps a results folder inside the tree's file budget (results/README.md: at most 200 files):
# the named headline files stay as they are, every other file goes into all-reports.tar.gz there.
#   scripts/results-pack.sh results/h200/<folder> call.sh summary.txt compare-contract.md ...
set -euo pipefail
if (( $# < 2 )); then
  echo "usage: $0 FOLDER FILE_TO_KEEP... (the other files are packed into FOLDER/all-reports.tar.gz)" >&2
  exit 2
fi
dir=$1
shift
[[ -d $dir ]] || { echo "$0: $dir is not a folder" >&2; exit 2; }
cd "$dir"
for keep in "$@"; do
  [[ -f $keep ]] || { echo "$0: $dir/$keep does not exist; nothing was changed" >&2; exit 2; }
done
[[ -e all-reports.tar.gz ]] && { echo "$0: $dir/all-reports.tar.gz exists already; nothing was changed" >&2; exit 2; }
mapfile -t pack < <(find . -maxdepth 1 -type f -printf '%f\n' | grep -v -x -F -f <(printf '%s\n' "$@") | sort)
if (( ${#pack[@]} == 0 )); then
  echo "$0: nothing to pack in $dir"
  exit 0
fi
tmp=$(mktemp "${TMPDIR:-/tmp}/results-pack.XXXXXX.tar.gz")
tar -czf "$tmp" "${pack[@]}"
tar -tzf "$tmp" > /dev/null  # the archive reads back before anything is removed
mv "$tmp" all-reports.tar.gz
rm -- "${pack[@]}"
echo "$dir: kept $#, packed ${#pack[@]} into all-reports.tar.gz"
