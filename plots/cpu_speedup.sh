#!/usr/bin/env bash
# cpu_speedup.sh [REPS] — the compiled CPU training step against the interpreter, in one run.
#
# The development machine is shared, so one pair of timings says little: this script
# interleaves the two modes (interp, compiled, interp, compiled, ...) REPS times (default 5)
# on each of two models — `make run`'s (2 layers, width 64, context 64, batch 8) and a wider
# one (4 layers, width 256, context 128, batch 8) — and prints, per model, the median of each
# mode's per-run median step time, the ratio of those medians, and the ratio of every
# adjacent pair (interp / compiled), so a burst of load on the machine shows as one odd pair.
# Each run is `kiln bench --device cpu` (3 warm-up steps, STEPS timed, default 10 for the
# small model and 5 for the wide one); the kernel cache is warmed before the first pair.
# KILN names the binary (default build/solutions/kiln). KILN_BASE, when set, names a second
# binary (say, a build of the commit before a change) whose two modes join the same
# interleaving, so a before/after comparison shares the machine's load too. Output: one line
# per run, then the summary; the last line is JSON.
set -u
KILN=${KILN:-build/solutions/kiln}
REPS=${1:-5}
small="--layers 2 --width 64 --heads 4 --context 64 --vocab 65 --batch 8 --steps ${STEPS_SMALL:-10}"
wide="--layers 4 --width 256 --heads 4 --context 128 --vocab 65 --batch 8 --steps ${STEPS_WIDE:-5}"

run_ms() { # [base:]mode flags... -> the run's median step time in ms
    local mode=$1 bin=$KILN; shift
    case $mode in base:*) bin=$KILN_BASE; mode=${mode#base:} ;; esac
    # shellcheck disable=SC2068
    "$bin" bench --device cpu --mode "$mode" $@ 2>/dev/null | tail -1 |
        sed -n 's/.*"step_ms_median": \([0-9.]*\).*/\1/p'
}
modes="interp compiled"
[ -n "${KILN_BASE:-}" ] && modes="$modes base:interp base:compiled"

declare -A ms
for model in small wide; do
    flags=${!model}
    for mode in $modes; do # warm the kernel caches (the compile is not timed anyway)
        [ "${mode#*:}" = compiled ] && run_ms "$mode" "$flags" >/dev/null
    done
    for ((r = 0; r < REPS; r++)); do
        for mode in $modes; do
            t=$(run_ms "$mode" "$flags")
            [ -n "$t" ] || { echo "cpu_speedup.sh: kiln bench --mode $mode $flags failed" >&2; exit 1; }
            ms[$model,$mode]+="$t "
            echo "$model rep $((r + 1)) $mode: $t ms"
        done
    done
done

"${PYTHON:-python3}" - "${ms[small,interp]}" "${ms[small,compiled]}" "${ms[wide,interp]}" "${ms[wide,compiled]}" \
    "${ms[small,base:interp]:-}" "${ms[small,base:compiled]:-}" "${ms[wide,base:interp]:-}" "${ms[wide,base:compiled]:-}" <<'PY'
import json, statistics as st, sys
out = {}
for i, model in enumerate(["small", "wide"]):
    for tag, k in (("", 1), ("base ", 5)):
        a = [float(x) for x in sys.argv[k + 2 * i].split()]
        b = [float(x) for x in sys.argv[k + 1 + 2 * i].split()]
        if not a:
            continue
        pairs = [x / y for x, y in zip(a, b)]
        mi, mc = st.median(a), st.median(b)
        print("%-10s interp %8.2f ms  compiled %8.2f ms  (medians of %d runs)  ratio %.2fx;  pairs: %s"
              % (tag + model, mi, mc, len(a), mi / mc, " ".join("%.2f" % p for p in pairs)))
        out[tag.strip() + ("_" if tag else "") + model] = {"interp_ms": mi, "compiled_ms": mc, "ratio": round(mi / mc, 3),
                                                           "pair_ratios": [round(p, 3) for p in pairs]}
print(json.dumps(out))
PY
