#!/usr/bin/env bash
# test_layers.sh — the layering check (core/mk/layers.py) fails on what it must.
#
# On a copy of the sources: the tree as it is passes; an include that goes up (tensor ->
# nn), a public header that includes a private one, and an ALLOWED cycle that is gone each
# fail, naming the file. On two small objects: a call that goes up (base -> nn) fails and
# the same call going down passes. Needs python3, cc and nm.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # [LAYERS_PY=copy] check NAME WANT(0|1) PATTERN-or-empty -- layers.py args
    local name=$1 want=$2 pat=$3; shift 4
    local out rc
    out=$(python3 "${LAYERS_PY:-$here/core/mk/layers.py}" "$@" 2>&1); rc=$?
    if [ "$rc" != "$want" ] || { [ -n "$pat" ] && ! grep -q -- "$pat" <<< "$out"; }; then
        echo "FAIL $name: exit $rc (want $want), output:"; echo "$out" | head -20; fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}
fresh() { rm -rf "$tmp/t"; mkdir -p "$tmp/t"; (cd "$here" && tar cf - core solutions labs 2>/dev/null) | tar xf - -C "$tmp/t"; }

fresh
check "the tree as it is" 0 "" -- --root "$tmp/t"

fresh
echo "#include \"kiln/nn.h\"" >> "$tmp/t/core/tensor/tensor.c"
check "planted include tensor -> nn" 1 'core/tensor/tensor.c:[0-9]*: \[tensor\] includes core/include/kiln/nn.h \[nn\]' -- --root "$tmp/t"

fresh
sed -i 's|#include "kiln/ops.def"|#include "ir/ir_impl.h"\n&|' "$tmp/t/core/include/kiln/ir.h"
check "planted private include in a public header" 1 'kiln/ir.h:[0-9]*: a public header includes the private core/ir/ir_impl.h' -- --root "$tmp/t"

# an ALLOWED entry whose edge no longer happens (planted in a copy of layers.py, so the
# test does not depend on which known cycles are still listed)
fresh
sed 's|^ALLOWED = \[|&\n    ("include", r"core/tensor/tensor\\.c$", r"core/include/kiln/nn\\.h$", "planted: gone"),|' \
    "$here/core/mk/layers.py" > "$tmp/layers.py"
grep -q 'planted: gone' "$tmp/layers.py" || { echo "FAIL: could not plant an ALLOWED entry"; exit 1; }
LAYERS_PY="$tmp/layers.py" check "an allowed cycle that is gone" 1 'no longer happens' -- --root "$tmp/t"

# calls: two objects, base/up.o uses a function of nn/top.o
rm -rf "$tmp/c"; mkdir -p "$tmp/c/core/base" "$tmp/c/core/nn" "$tmp/o/core/base" "$tmp/o/core/nn"
printf 'void kn_top(void);\nvoid kn_up(void) { kn_top(); }\n' > "$tmp/c/core/base/up.c"
printf 'void kn_top(void) {}\n' > "$tmp/c/core/nn/top.c"
cc -c "$tmp/c/core/base/up.c" -o "$tmp/o/core/base/up.o" && cc -c "$tmp/c/core/nn/top.c" -o "$tmp/o/core/nn/top.o" || exit 1
check "planted call base -> nn" 1 'core/base/up.c: \[base\] calls kn_top, defined in core/nn/top.c \[nn\]' -- --root "$tmp/c" --objects "$tmp/o" --partial
mv "$tmp/c/core/base/up.c" "$tmp/c/core/nn/up.c"; mv "$tmp/c/core/nn/top.c" "$tmp/c/core/base/top.c"
mv "$tmp/o/core/base/up.o" "$tmp/o/core/nn/up.o"; mv "$tmp/o/core/nn/top.o" "$tmp/o/core/base/top.o"
check "the same call going down" 0 "" -- --root "$tmp/c" --objects "$tmp/o" --partial

[ $fails -eq 0 ] && echo "layers self-test: all passed" || { echo "layers self-test: $fails failed"; exit 1; }
