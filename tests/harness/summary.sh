#!/usr/bin/env bash
# summary.sh DIR — add up every *.count under DIR ("passed failed [abnormal]") and print
# the one closing line "N passed, N failed". Exit 1 when anything failed or nothing ran.
set -u
p=0 f=0
while read -r a b _; do p=$((p + a)); f=$((f + b)); done < <(find "$1" -name '*.count' -exec cat {} +)
echo "$p passed, $f failed"
[ "$f" -eq 0 ] && [ "$p" -gt 0 ]
