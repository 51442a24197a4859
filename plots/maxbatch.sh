#!/usr/bin/env bash
# maxbatch.sh [FLAGS...] — the largest batch each side can train on one GPU, in one call.
#
# Issue 15 asks how much larger a batch kiln's memory planning, flash attention and recompute
# let it train than PyTorch eager in the same memory. For each configuration this searches
# the batch B (doubling from MAXB_START, default 8, up to MAXB_MAX, default 256, then
# bisecting) for which one warm-up and one timed step of `kiln bench` (or
# plots/bench_torch.py) end without running out of GPU memory, at FLAGS' shape (default:
# GPT-2 124M, T=1024). A probe that fails for any other reason stops that configuration
# with the error. Prints one line per probe and a table last; writes $LOGS/maxbatch.tsv
# (LOGS: default $OUT when set, else /tmp/kiln-maxbatch), every probe's log beside it.
#
#   KILN_CONFIGS   `kiln bench` flag sets separated by ';' (default: compiled TF32; with
#                  --flash; --flash --remat selective; --remat full)
#   TORCH_CONFIGS  plots/bench_torch.py flag sets separated by ';' (default: eager with
#                  SDPA, TF32); skipped with a line when no python3 here imports torch
#   KILN           the kiln binary (default build/solutions/kiln)
#   PROBE_TIMEOUT  seconds a probe may take (default 300)
set -u
KILN=${KILN:-build/solutions/kiln}
LOGS=${LOGS:-${OUT:-/tmp/kiln-maxbatch}}
START=${MAXB_START:-8} MAX=${MAXB_MAX:-256}
KILN_CONFIGS=${KILN_CONFIGS:---mode compiled --tf32;--mode compiled --tf32 --flash;--mode compiled --tf32 --flash --remat selective;--mode compiled --tf32 --remat full}
TORCH_CONFIGS=${TORCH_CONFIGS:---attn sdpa --tf32}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$LOGS"
case "$START$MAX" in *[!0-9]*) echo "maxbatch.sh: MAXB_START and MAXB_MAX must be whole numbers" >&2; exit 2 ;; esac
[ "$START" -ge 1 ] && [ "$MAX" -ge "$START" ] || { echo "maxbatch.sh: need 1 <= MAXB_START <= MAXB_MAX" >&2; exit 2; }
torch_py=$(bash "$here/../core/mk/python.sh" torch) || torch_py=
tsv="$LOGS/maxbatch.tsv"
printf 'side\tconfig\tmax_batch\tpeak_mib\tstep_ms\tfirst_failing\n' > "$tsv"

# probe SIDE CONFIG B: 0 fits (its JSON line saved in $LOGS/last.json), 1 out of memory,
# 2 failed otherwise (the log says why).
probe() {
    local side=$1 config=$2 b=$3 log rc=0
    shift 3
    log="$LOGS/probe_${side}_$(echo "$config" | tr -c 'a-zA-Z0-9' _)_b$b.log"
    if [ "$side" = kiln ]; then
        # shellcheck disable=SC2086
        timeout "${PROBE_TIMEOUT:-300}" "$KILN" bench $config "$@" --batch "$b" --warmup 1 --steps 1 > "$log" 2>&1 || rc=$?
    else
        # shellcheck disable=SC2086
        timeout "${PROBE_TIMEOUT:-300}" "$torch_py" "$here/bench_torch.py" $config "$@" --batch "$b" --warmup 1 --steps 1 \
            > "$log" 2>&1 || rc=$?
    fi
    if [ $rc -eq 0 ] && grep '^{' "$log" | tail -n 1 > "$LOGS/last.json" && [ -s "$LOGS/last.json" ]; then
        echo "  $side [$config] B=$b: fits"; return 0
    fi
    if grep -qiE 'out of memory|OutOfMemoryError|kn_cache_alloc: .* asked while' "$log"; then
        echo "  $side [$config] B=$b: out of memory"; return 1
    fi
    echo "  $side [$config] B=$b: FAILED (exit $rc; see $log): $(grep -iE '^kiln|error' "$log" | head -n 1 | cut -c1-160)"
    return 2
}

# search SIDE CONFIG FLAGS...: the doubling and then the bisection; appends a TSV row.
search() {
    local side=$1 config=$2 lo=0 hi=0 b=$START rc best=
    shift 2
    echo "== $side [$config]"
    while :; do
        probe "$side" "$config" "$b" "$@"; rc=$?
        [ $rc -eq 2 ] && { printf '%s\t%s\tFAILED\t-\t-\t-\n' "$side" "$config" >> "$tsv"; return; }
        if [ $rc -eq 0 ]; then
            lo=$b; best=$(cat "$LOGS/last.json")
            [ "$b" -ge "$MAX" ] && break
            b=$((b * 2)); [ "$b" -gt "$MAX" ] && b=$MAX
        else
            hi=$b; break
        fi
    done
    while [ "$hi" -gt 0 ] && [ $((hi - lo)) -gt 1 ]; do
        b=$(((lo + hi) / 2))
        probe "$side" "$config" "$b" "$@"; rc=$?
        [ $rc -eq 2 ] && break
        if [ $rc -eq 0 ]; then lo=$b; best=$(cat "$LOGS/last.json"); else hi=$b; fi
    done
    if [ -z "$best" ]; then
        printf '%s\t%s\t0\t-\t-\t%s\n' "$side" "$config" "$hi" >> "$tsv"; return
    fi
    "${PYTHON:-python3}" -c 'import json, sys
r = json.loads(sys.argv[1])
print("%s\t%s\t%d\t%.0f\t%.2f\t%s" % (sys.argv[2], sys.argv[3], r["batch"], r["peak_mem_mib"], r["step_ms_median"], sys.argv[4]))' \
        "$best" "$side" "$config" "$([ "$hi" -gt 0 ] && echo "$hi" || echo "none up to $MAX")" >> "$tsv"
}

IFS=';' read -r -a kconfs <<< "$KILN_CONFIGS"
for c in "${kconfs[@]}"; do search kiln "$c" "$@"; done
if [ -n "$torch_py" ]; then
    IFS=';' read -r -a tconfs <<< "$TORCH_CONFIGS"
    for c in "${tconfs[@]}"; do search torch "$c" "$@"; done
else
    echo "== PyTorch: no python3 here can import torch; the PyTorch side is skipped"
fi
echo
column -t -s "$(printf '\t')" "$tsv" 2>/dev/null || cat "$tsv"
echo "max_batch: the largest batch whose training step (1 warm-up, 1 timed) ran; peak_mib and step_ms at that batch"
