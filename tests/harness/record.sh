#!/usr/bin/env bash
# record.sh DIR NAME CMD... — run a check that is one test: record "1 0" or "0 1" in
# DIR/NAME.count, keep its output in DIR/NAME.log and show it when it fails.
set -u
dir=$1 name=$2; shift 2
mkdir -p "$dir"
if "$@" > "$dir/$name.log" 2>&1; then
    echo "1 0 0 0" > "$dir/$name.count"; echo "$name: 1 passed, 0 failed"
else
    echo "0 1 0 0" > "$dir/$name.count"; echo "$name: 0 passed, 1 failed"
    sed 's/^/    /' "$dir/$name.log" | tail -n 40
    exit 1
fi
