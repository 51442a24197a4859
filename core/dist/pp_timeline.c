/* pp_timeline.c — what pipeline parallelism reports of its last step (kiln/mesh.h): every
 * rank's actions gathered into a timeline (TSV, drawn by plots/pp_timeline.sh) and the
 * measured bubble, 1 - busy / (p x makespan), busy from each action's input arriving to its
 * end; and every rank's stash peak and own slabs' bytes (kn_pp_rank_stats). */
#include <stdio.h>
#include <string.h>

#include "kiln/mesh.h"
#include "pp_impl.h"

/* ---------------------------------------------------------------- the timeline */

/* The bytes of a tensor this rank allocated (0 for none). */
static double tensor_bytes(const kn_tensor *x) {
    return x ? (double)kn_tensor_numel(x) * (double)kn_dtype_size(x->dtype) : 0;
}

kn_status kn_pp_rank_stats(kn_pp *pp, double *out) {
    if (!pp || !out) return kn_error(KN_ERR_ARG, "kn_pp_rank_stats: NULL argument");
    for (int r = 0; r < KN_PP_STATS * pp->p; r++) out[r] = 0;
    double *me = out + KN_PP_STATS * pp->rank;
    me[0] = pp->stash_peak;
    me[1] = (double)pp->stash_peak_bytes;
    me[2] = (double)pp->held;
    me[3] = tensor_bytes(pp->lparam);
    me[4] = tensor_bytes(pp->lgrad);
    for (int k = 0; k < pp->nranges; k++) me[5] += tensor_bytes(pp->state[k]);
    me[6] = tensor_bytes(pp->llow);
    return kn_pp_sum_f64(pp, pp->comm, out, KN_PP_STATS * pp->p, "pipeline rank statistics");
}

kn_status kn_pp_timeline(kn_pp *pp, const char *path, double *bubble) {
    if (!pp || !pp->events) return kn_error(KN_ERR_ARG, "kn_pp_timeline: NULL argument");
    int n = pp->nactions, p = pp->p, w = 6;
    double *mine = kn_calloc((size_t)n * w, sizeof *mine), *all = kn_calloc((size_t)n * w * p, sizeof *all);
    kn_status st = mine && all ? KN_OK : kn_error(KN_ERR_OOM, "kn_pp_timeline: out of memory");
    for (int i = 0; st == KN_OK && i < n; i++) {
        const kn_pp_record *e = &pp->events[i];
        double row[6] = {e->op, e->micro, e->chunk, e->t0, e->t_ready, e->t1};
        memcpy(mine + (size_t)i * w, row, sizeof row);
    }
    if (st == KN_OK) {
        /* every rank's rows: an all-reduce of zero-padded blocks works on both backends */
        memcpy(all + (size_t)pp->rank * n * w, mine, (size_t)n * w * sizeof *all);
        st = kn_pp_sum_f64(pp, pp->comm, all, n * w * p, "pipeline timeline");
    }
    double busy = 0, span = 0;
    for (int r = 0; st == KN_OK && r < p; r++)
        for (int i = 0; i < n; i++) {
            const double *row = all + ((size_t)r * n + i) * w;
            busy += row[5] - row[4];
            if (row[5] > span) span = row[5];
        }
    if (st == KN_OK && bubble) *bubble = span > 0 ? 1.0 - busy / (p * span) : 0;
    if (st == KN_OK && path && pp->rank == 0) {
        FILE *f = fopen(path, "w");
        if (!f) st = kn_error(KN_ERR_IO, "--timeline %s: cannot open for writing", path);
        if (st == KN_OK) {
            fprintf(f, "# kiln pipeline timeline: schedule %s, p %d, m %d, v %d (seconds from the step's start)\n",
                    kn_pp_kind_name(pp->cfg.schedule), p, pp->cfg.micro, pp->v);
            fprintf(f, "# rank\top\tmicro\tchunk\tt0\tt_ready\tt1\tidle (before t_ready, since the rank's last "
                    "action ended)\n");
            for (int r = 0; r < p; r++)
                for (int i = 0; i < n; i++) {
                    const double *row = all + ((size_t)r * n + i) * w, prev = i ? row[5 - w] : 0;
                    fprintf(f, "%d\t%s\t%d\t%d\t%.6f\t%.6f\t%.6f\t%.6f\n", r, row[0] == KN_PP_FWD ? "F" : "B",
                            (int)row[1], (int)row[2], row[3], row[4], row[5], row[4] - prev);
                }
            if (fclose(f) != 0) st = kn_error(KN_ERR_IO, "--timeline %s: write failed", path);
        }
    }
    kn_free(mine);
    kn_free(all);
    return st;
}
