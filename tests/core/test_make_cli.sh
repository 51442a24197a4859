#!/usr/bin/env bash
# test_make_cli.sh — the build's own behaviour, as a student, an instructor or the lead
# meets it (a `make test` step, tests/make-cli.mk):
#   1. `make lab99` / `make test-lab99` fail and name every lab that exists;
#      `make help` lists the targets (labNN, run LAB=NN, mutants, grade, book, gpu-check);
#      `make mutants` without LAB says how to call it;
#   2. core/mk/python.sh picks the first interpreter that has the modules asked for,
#      /usr/bin/python3 first, then the PATH's (a shim without numpy is passed over), and
#      fails cleanly when none has them;
#   3. mutant keys (tests/mutants/mutate.py) survive an edit elsewhere in the file;
#   4. Criterion carried by core/mk/carry-criterion.sh builds a test object and links a
#      test binary with no reference to the system's Criterion (core/carry.mk), as on the
#      GPU machine, which has none.
# Prints "ok" or what failed.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The make under test starts clean: no MAKEFLAGS, and no SAN=1 from `make SAN=1 test`.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SAN make --no-print-directory "$@"; }
labs=$(cd labs && ls -d lab[0-9][0-9]-* | tr '\n' ' ')

# 1. unknown labs, help, mutants usage
for goal in lab99 test-lab99 lab7; do
    out=$(mk "$goal" 2>&1) && fail "make $goal succeeded"
    echo "$out" | grep -q "there is no lab ${goal##*lab}" || fail "make $goal: $out"
    for l in $labs; do echo "$out" | grep -q "$l" || fail "make $goal does not name $l: $out"; done
done
help=$(mk help) || fail "make help failed"
for want in 'make labNN' 'make test-labNN' 'make run LAB=NN' 'make mutants LAB=NN' 'make grade ' \
            'make book' 'make gpu-check' 'make test ' 'HIDDEN=1' 'make skeletons'; do
    echo "$help" | grep -qF -- "$want" || fail "make help does not mention '$want'"
done
out=$(mk mutants 2>&1) && fail "make mutants without LAB succeeded"
echo "$out" | grep -q "usage: make mutants LAB=NN" || fail "make mutants without LAB: $out"

# 2. the Python interpreter
py=$(bash core/mk/python.sh numpy) || fail "core/mk/python.sh numpy found no interpreter (make deps)"
"$py" -c 'import numpy' || fail "$py cannot import numpy"
out=$(bash core/mk/python.sh kiln_no_such_module_xyz) && fail "python.sh found kiln_no_such_module_xyz: $out"
[ -z "$out" ] || fail "python.sh printed '$out' for a module nobody has"
mkdir -p "$tmp/shim" "$tmp/mods"
echo 'probe = 1' > "$tmp/mods/kiln_probe_mod.py"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$tmp/mods" "$py" > "$tmp/shim/python3"
chmod +x "$tmp/shim/python3"
got=$(PATH="$tmp/shim:$PATH" bash core/mk/python.sh kiln_probe_mod) || fail "python.sh missed the PATH's python3"
[ "$got" = "$tmp/shim/python3" ] || fail "python.sh kiln_probe_mod picked $got, not the PATH's python3"
got=$(PATH="$tmp/shim:$PATH" bash core/mk/python.sh numpy)
[ "$got" = "$py" ] || fail "with a shim first on the PATH, python.sh numpy picked $got, not $py"
[ "$(mk -s -f Makefile -f <(printf 'print-%%:\n\t@echo $($*)\n') print-PYTHON)" = "$py" ] ||
    fail "the Makefile's PYTHON is not $py"

# 3. mutant keys are stable under edits elsewhere in the file
"$py" - <<'PY' || fail "mutant keys"
import sys
sys.path.insert(0, "tests/mutants")
import mutate
path = "solutions/lab01-tensors/broadcast.c"
src = open(path).read()
a = mutate.find_mutants(path, src)
keys = [m.key for m in a]
assert len(keys) == len(set(keys)) and len(keys) > 20, "keys not unique"
# an edit above everything (a new statement in the first region) shifts every line
first = src.index("/* BEGIN SOLUTION */") + len("/* BEGIN SOLUTION */")
edited = src[:first] + "\n    int kiln_unused_probe = 0; (void)kiln_unused_probe;" + src[first:]
b = {m.key: m for m in mutate.find_mutants(path, edited)}
for m in a:
    assert m.key in b, "key %s lost by an edit elsewhere" % m.key
    assert b[m.key].what == m.what and b[m.key].line == m.line + 1, m.key
# and every mutant changes the text, inside a BEGIN/END SOLUTION region
spans = mutate.regions(src)
for m in a:
    assert m.apply(src) != src and any(s <= m.start < e for s, e in spans), m.key
print("ok: %d keys stable" % len(a))
PY

# 4. Criterion carried, as on the GPU machine
bash core/mk/carry-criterion.sh "$tmp/carry" > "$tmp/carry.log" 2>&1 || { cat "$tmp/carry.log"; fail "carry-criterion.sh"; }
[ -f "$tmp/carry/include/criterion/criterion.h" ] && [ -f "$tmp/carry/lib/libcriterion.so.3" ] ||
    fail "carry-criterion.sh did not write the headers and the library"
ls "$tmp/carry/lib" | grep -qE '^(libc|libm|libresolv)\.so' && fail "carry-criterion.sh copied a C library part"
vars="BUILD_ROOT=$tmp/b CARRY_DIR=$tmp/carry CRITERION_FROM=carry NVCC="
mk $vars "$tmp/b/obj/tests/harness/kn_test.o" "$tmp/b/obj/tests/harness/kn_out.o" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build with the carried headers"; }
grep -q "$tmp/carry/include/criterion/criterion.h" "$tmp/b/obj/tests/harness/kn_test.d" ||
    fail "kn_test.o was not compiled against the carried headers"
grep -q '/usr/include/criterion' "$tmp/b/obj/tests/harness/kn_test.d" && fail "kn_test.o used /usr/include/criterion"
ldlibs=$(mk -s $vars -f Makefile -f <(printf 'print-%%:\n\t@echo $($*)\n') print-TEST_LDLIBS)
echo "$ldlibs" | grep -q -- '-lcriterion\b' && fail "TEST_LDLIBS still names the system's -lcriterion: $ldlibs"
cc -o "$tmp/t" "$tmp/b/obj/tests/harness/kn_test.o" "$tmp/b/obj/tests/harness/kn_out.o" $ldlibs || fail "link with $ldlibs"
ldd "$tmp/t" | grep -q "libcriterion.so.3 => $tmp/carry/lib/libcriterion.so.3" || { ldd "$tmp/t"; fail "libcriterion not from the carry"; }
ldd "$tmp/t" | grep -q "libgit2.* => $tmp/carry/lib/" || { ldd "$tmp/t"; fail "libcriterion's own dependencies not from the carry"; }
"$tmp/t" > "$tmp/t.out" 2>&1 || { cat "$tmp/t.out"; fail "the test binary linked to the carried Criterion does not run"; }
echo ok
