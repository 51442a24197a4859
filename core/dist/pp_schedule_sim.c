/* pp_schedule_sim.c — replays pipeline schedules on a clock: each rank's list of forwards
 * and backwards with the dependencies between stages, to measure the step's time, each
 * rank's idle share (the bubble) and the activations each rank keeps alive, and to find a
 * deadlock (kn_pp_simulate, kiln/pipeline.h). Staff code, not a lab unit.
 *
 * Why a simulator: the bubble formula (p-1)/(m+p-1) and "1F1B keeps at most p micro-
 * batches alive" are claims about the lists kn_pp_schedule writes, and the real runner's
 * timings mix them with communication and noise. Here a forward costs tf and a backward
 * tb exactly, communication is free, and every action starts as soon as its rank is free
 * and its inputs exist; so a test can check the formula to the last bit, and a schedule
 * that would hang the real ranks (a rank waiting on a message that is sent only after
 * something it has not run yet) shows up as "no action can run".
 *
 * The replay is a fixed point: sweep the ranks, running each one's next actions while
 * their dependencies have finished; an action's start is the latest of its rank's clock
 * and its dependencies' ends. The times do not depend on the sweep order (every start is a
 * maximum of finished ends), and a sweep that runs nothing while actions are left is a
 * deadlock. */
#include <stdio.h>
#include <string.h>

#include "kiln/pipeline.h"

/* The sizes (stages = p v model stages) and each (stage, micro-batch) action's end time. */
typedef struct sim_state {
    int p, m, v, stages;
    double *fend, *bend; /* [stages * m], -1 until the action ran */
} sim_state;

static double *end_of(const sim_state *st, bool fwd, int stage, int micro) {
    return (fwd ? st->fend : st->bend) + (size_t)stage * st->m + micro;
}

/* Whether action a of rank r can run now; *ready gets its dependencies' latest end. */
static bool deps_done(const sim_state *st, int r, kn_pp_action a, double *ready) {
    int s = a.chunk * st->p + r;
    double t = 0;
    if (a.op == KN_PP_FWD) {
        if (s > 0) {
            t = *end_of(st, true, s - 1, a.micro);
            if (t < 0) return false;
        }
    } else {
        t = *end_of(st, true, s, a.micro);
        if (t < 0) return false;
        if (s + 1 < st->stages) {
            double u = *end_of(st, false, s + 1, a.micro);
            if (u < 0) return false;
            if (u > t) t = u;
        }
    }
    *ready = t;
    return true;
}

/* Every list names each (op, chunk, micro-batch) exactly once, all in range. */
static kn_status check_lists(int p, int m, int v, const kn_pp_action *const *lists, const int *counts) {
    size_t n = (size_t)p * v * m * 2;
    unsigned char *seen = kn_calloc(n, 1);
    if (!seen) return kn_error(KN_ERR_OOM, "kn_pp_simulate: %zu flags", n);
    kn_status st = KN_OK;
    for (int r = 0; r < p && st == KN_OK; r++) {
        if (counts[r] != 2 * m * v || (counts[r] > 0 && !lists[r])) {
            st = kn_error(KN_ERR_ARG, "kn_pp_simulate: rank %d has %d actions, not %d", r, counts[r], 2 * m * v);
            break;
        }
        for (int i = 0; i < counts[r]; i++) {
            kn_pp_action a = lists[r][i];
            if ((a.op != KN_PP_FWD && a.op != KN_PP_BWD) || a.micro < 0 || a.micro >= m || a.chunk < 0 || a.chunk >= v) {
                st = kn_error(KN_ERR_ARG, "kn_pp_simulate: rank %d action %d (op %d, micro-batch %d, chunk %d) is out of range",
                              r, i, (int)a.op, a.micro, a.chunk);
                break;
            }
            size_t key = (((size_t)r * v + a.chunk) * m + a.micro) * 2 + (a.op == KN_PP_BWD);
            if (seen[key]++) {
                st = kn_error(KN_ERR_ARG, "kn_pp_simulate: rank %d runs %s of micro-batch %d, chunk %d twice", r,
                              a.op == KN_PP_FWD ? "the forward" : "the backward", a.micro, a.chunk);
                break;
            }
        }
    }
    kn_free(seen);
    return st;
}

kn_status kn_pp_simulate_lists(int p, int m, int v, const kn_pp_action *const *lists, const int *counts, double tf,
                               double tb, kn_pp_sim *out) {
    if (!lists || !counts || !out) return kn_error(KN_ERR_ARG, "kn_pp_simulate: NULL lists, counts or out");
    if (p < 1 || m < 1 || v < 1 || !(tf >= 0) || !(tb >= 0))
        return kn_error(KN_ERR_ARG, "kn_pp_simulate: %d ranks, %d micro-batches, %d chunks, tf %g, tb %g", p, m, v, tf, tb);
    KN_TRY(check_lists(p, m, v, lists, counts));
    sim_state st = {p, m, v, p * v, NULL, NULL};
    size_t cells = (size_t)st.stages * m;
    st.fend = kn_malloc(cells * sizeof(double));
    st.bend = kn_malloc(cells * sizeof(double));
    int *next = kn_calloc((size_t)p, sizeof(int)), *live = kn_calloc((size_t)p, sizeof(int));
    double *clock = kn_calloc((size_t)p, sizeof(double));
    kn_status status = KN_OK;
    if (!st.fend || !st.bend || !next || !live || !clock) {
        status = kn_error(KN_ERR_OOM, "kn_pp_simulate: the state of %d stages x %d micro-batches", st.stages, m);
        goto done;
    }
    for (size_t i = 0; i < cells; i++) st.fend[i] = st.bend[i] = -1;
    if (out->busy) memset(out->busy, 0, (size_t)p * sizeof(double));
    if (out->peak_live) memset(out->peak_live, 0, (size_t)p * sizeof(int));
    int left = 2 * m * v * p;
    out->makespan = 0;
    out->nevents = 0;
    for (bool progress = true; left > 0 && progress;) {
        progress = false;
        for (int r = 0; r < p; r++) {
            double ready;
            while (next[r] < counts[r] && deps_done(&st, r, lists[r][next[r]], &ready)) {
                kn_pp_action a = lists[r][next[r]];
                double start = ready > clock[r] ? ready : clock[r], dur = a.op == KN_PP_FWD ? tf : tb;
                clock[r] = start + dur;
                *end_of(&st, a.op == KN_PP_FWD, a.chunk * p + r, a.micro) = clock[r];
                if (clock[r] > out->makespan) out->makespan = clock[r];
                if (out->busy) out->busy[r] += dur;
                live[r] += a.op == KN_PP_FWD ? 1 : -1;
                if (out->peak_live && live[r] > out->peak_live[r]) out->peak_live[r] = live[r];
                if (out->events) out->events[r * 2 * m * v + next[r]] = (kn_pp_event){r, a, start, clock[r]};
                next[r]++;
                left--;
                progress = true;
            }
        }
    }
    if (left > 0) {
        char msg[512];
        int len = 0;
        for (int r = 0; r < p && len < (int)sizeof msg - 64; r++) {
            if (next[r] >= counts[r]) continue;
            kn_pp_action a = lists[r][next[r]];
            len += snprintf(msg + len, sizeof msg - (size_t)len, "%s rank %d waits at %c%d (chunk %d)", len ? ";" : "", r,
                            a.op == KN_PP_FWD ? 'F' : 'B', a.micro, a.chunk);
        }
        status = kn_error(KN_ERR_UNSUPPORTED, "kn_pp_simulate: deadlock, %d actions left:%s", left, msg);
        goto done;
    }
    out->nevents = out->events ? 2 * m * v * p : 0;
    double busy = 0;
    for (int r = 0; r < p; r++) busy += m * v * (tf + tb);
    out->bubble = out->makespan > 0 ? 1.0 - busy / (p * out->makespan) : 0.0;
done:
    kn_free(st.fend);
    kn_free(st.bend);
    kn_free(next);
    kn_free(live);
    kn_free(clock);
    return status;
}

kn_status kn_pp_simulate(kn_pp_kind k, int p, int m, int v, double tf, double tb, kn_pp_sim *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_pp_simulate: NULL out");
    if (p < 1 || m < 1 || v < 1 || (int64_t)2 * m * v > (1 << 24))
        return kn_error(KN_ERR_ARG, "kn_pp_simulate: %d stages, %d micro-batches, %d chunks", p, m, v);
    int cap = 2 * m * v;
    kn_pp_action *all = kn_malloc((size_t)p * cap * sizeof(kn_pp_action));
    const kn_pp_action **lists = kn_malloc((size_t)p * sizeof(*lists));
    int *counts = kn_malloc((size_t)p * sizeof(int));
    kn_status st = KN_OK;
    if (!all || !lists || !counts) st = kn_error(KN_ERR_OOM, "kn_pp_simulate: %d lists of %d actions", p, cap);
    for (int r = 0; r < p && st == KN_OK; r++) {
        lists[r] = all + (size_t)r * cap;
        st = kn_pp_schedule(k, p, m, v, r, all + (size_t)r * cap, cap, &counts[r]);
    }
    if (st == KN_OK) st = kn_pp_simulate_lists(p, m, v, lists, counts, tf, tb, out);
    kn_free(all);
    kn_free(lists);
    kn_free(counts);
    return st;
}
