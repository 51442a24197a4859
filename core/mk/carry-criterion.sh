#!/usr/bin/env bash
# carry-criterion.sh [DIR] — copy Criterion (its headers and libcriterion with the shared
# libraries it needs) into DIR (default .carry, ignored by git) for a machine that has no
# Criterion: the lent GPU machine has CUDA, NCCL, Open MPI and PyTorch but neither
# Criterion's headers nor its library. Run it here, carry DIR with the working tree (the
# device tool's `carry: [".carry"]`), and `make gpu-check` (or any test build) there finds
#     DIR/include/criterion/*.h     compiled with -IDIR/include           (core/carry.mk)
#     DIR/lib/libcriterion.so.3     linked with -l:libcriterion.so.3, and found at run time
#     DIR/lib/<its dependencies>    through an RPATH to DIR/lib (no LD_LIBRARY_PATH needed)
# The C library and its parts (libm, libresolv, ...), libstdc++ and libgcc_s are left out:
# the other machine has its own, and a copy from here would shadow them.
set -eu
dir=${1:-.carry}
inc=$(echo '#include <criterion/criterion.h>' | ${CC:-cc} -E -H -x c - 2>&1 >/dev/null |
      awk '/criterion\/criterion\.h$/ {print $NF; exit}')
[ -n "$inc" ] || { echo "carry-criterion: criterion/criterion.h not found (run: make deps)"; exit 1; }
lib=$(ldconfig -p | awk '/libcriterion\.so\.3 /{print $NF; exit}')
[ -n "$lib" ] || { echo "carry-criterion: libcriterion.so.3 not found (run: make deps)"; exit 1; }
rm -rf "$dir/include/criterion" "$dir/lib"
mkdir -p "$dir/include" "$dir/lib"
cp -R "$(dirname "$inc")" "$dir/include/criterion"
cp -L "$lib" "$dir/lib/"
ldd "$lib" | awk '$3 ~ /^\// {print $3}' |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libnsl|libutil|libanl|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$dir/lib/"; done
echo "carry-criterion: $(find "$dir/include/criterion" -name '*.h*' | wc -l) headers in $dir/include/criterion," \
     "$(ls "$dir/lib" | wc -l) libraries in $dir/lib ($(du -sh "$dir" | cut -f1)); carry $dir"
