#!/usr/bin/env bash
# broken.sh — `book.py check` must fail on book/tests/broken.md and name every broken
# directive with file:line; passes only when all of them are reported (and nothing else).
set -u
cd "$(dirname "$0")/../.."
out=$("${PYTHON:-python3}" book/book.py check book/tests/broken.md 2>&1); rc=$?
echo "$out"
fail=0
[ $rc -ne 0 ] || { echo "FAIL: book.py check exited 0 on a lesson with broken directives"; fail=1; }
while IFS= read -r want; do
    grep -qxF -- "$want" <<< "$out" || { echo "FAIL: not reported: $want"; fail=1; }
done <<'WANT'
book/tests/broken.md:9: listing file=core/include/kiln/tensor.h symbol=kn_tensor_no_such_function: not found (no definition, declaration, type or #define named kn_tensor_no_such_function)
book/tests/broken.md:12: listing file=core/no/such/file.c symbol=kn_anything: not found (no such file)
book/tests/broken.md:15: listing file=book/tests/fixture.c symbol=region:dangling: not found ('kn:region dangling' has no 'kn:endregion dangling' after it)
book/tests/broken.md:18: cross-reference to 97-nowhere.md: no such lesson
warning: book/tests/broken.md:20: figure plots/not-made-yet.png not produced yet (placeholder shown)
book/tests/broken.md:22: figure book/tests/figures/no-such-figure.svg: no such file
book check: 1 lessons, 1 listings resolved, 0 runnable examples, 5 problem(s)
WANT
[ $fail -eq 0 ] && echo "broken.sh: every broken directive was reported"
exit $fail
