#!/usr/bin/env bash
# summary.sh DIR — add up every *.count under DIR ("passed failed [abnormal [skipped]]")
# and print the one closing line "N passed, N failed" (", N skipped" when some were).
# Exit 1 when anything failed or nothing ran.
set -u
p=0 f=0 k=0
while read -r a b _ d; do p=$((p + a)); f=$((f + b)); k=$((k + ${d:-0})); done < <(find "$1" -name '*.count' -exec cat {} +)
if [ "$k" -gt 0 ]; then echo "$p passed, $f failed, $k skipped"; else echo "$p passed, $f failed"; fi
[ "$f" -eq 0 ] && [ "$p" -gt 0 ]
