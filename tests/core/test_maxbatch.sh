#!/usr/bin/env bash
# test_maxbatch.sh — plots/maxbatch.sh's search, without a GPU: a stand-in for kiln that runs
# out of memory above batch 11 (with kiln's allocator message) must give max_batch 11 and
# first failing 12 after the doubling 8, 16 and the bisection; one that fails for another
# reason must be reported FAILED, not taken for out of memory. Prints "ok" or what failed.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/fake" <<'SH'
#!/usr/bin/env bash
b=0; prev=
for a in "$@"; do [ "$prev" = --batch ] && b=$a; prev=$a; done
case " $* " in *" --broken "*) echo "kiln bench: something else went wrong" >&2; exit 1 ;; esac
if [ "$b" -gt 11 ]; then
    echo "kiln: kn_cache_alloc: 123 bytes (0.1 MiB, class 3) asked while kiln holds 70000.0 MiB live" >&2; exit 1
fi
echo "{\"batch\": $b, \"peak_mem_mib\": $((b * 1000)), \"step_ms_median\": 1.5}"
SH
chmod +x "$dir/fake"
KILN="$dir/fake" LOGS="$dir/logs" KILN_CONFIGS="--mode compiled;--broken" MAXB_START=8 MAXB_MAX=64 \
    bash "$root/plots/maxbatch.sh" > "$dir/out" 2>&1 || { echo "FAIL: maxbatch.sh exited non-zero"; cat "$dir/out"; exit 1; }
row=$(grep -P '^kiln\t--mode compiled\t' "$dir/logs/maxbatch.tsv" || true)
[ "$row" = "$(printf 'kiln\t--mode compiled\t11\t11000\t1.50\t12')" ] || { echo "FAIL: row '$row'"; cat "$dir/out"; exit 1; }
grep -qP '^kiln\t--broken\tFAILED' "$dir/logs/maxbatch.tsv" || { echo "FAIL: --broken not FAILED"; cat "$dir/out"; exit 1; }
grep -q "B=16: out of memory" "$dir/out" || { echo "FAIL: no doubling to 16"; cat "$dir/out"; exit 1; }
echo ok
