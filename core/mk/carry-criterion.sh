#!/usr/bin/env bash
# carry-criterion.sh DIR — copy libcriterion and the shared libraries it needs (all but the
# C library itself) into DIR, for running kiln's Criterion test binaries on a machine that
# has no Criterion (the lent GPU machine): run them with LD_LIBRARY_PATH=DIR.
set -eu
dir=$1
mkdir -p "$dir"
lib=$(ldconfig -p | awk '/libcriterion\.so\.3 /{print $NF; exit}')
[ -n "$lib" ] || { echo "carry-criterion: libcriterion.so.3 not found (run: make deps)"; exit 1; }
cp -L "$lib" "$dir/"
ldd "$lib" | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$dir/"; done
echo "carry-criterion: $(ls "$dir" | wc -l) libraries in $dir"
