/* report.c — what reads a compiled kn_program without changing it: the memory plan as a
 * TSV, the step profile, the schedule and every kernel's IR, C and CUDA, and the comparison
 * of a program with the interpreter (kiln/program.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/codegen.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "program/program_impl.h"

kn_status kn_program_memory_tsv(FILE *f, const kn_program *p) {
    if (!f || !p) return kn_error(KN_ERR_ARG, "kn_program_memory_tsv: NULL argument");
    if (!p->mem_off) return kn_error(KN_ERR_ARG, "kn_program_memory_tsv: not a compiled program (no memory plan)");
    fprintf(f, "# step\tlive_bytes\tarena_top_bytes\twhat\n");
    for (int s = 0; s < p->nsteps; s++) {
        double live = 0, hi = 0;
        for (int i = 0; i < p->g->nnodes; i++) {
            /* a value written in place lives in its operand's bytes at its own step */
            if (p->mem_off[i] < 0 || p->mem_def[i] + (p->mem_from[i] >= 0) > s || s > p->mem_last[i]) continue;
            double b = (double)kn_program_plan_size(&p->g->nodes[i].type);
            live += b;
            if ((double)p->mem_off[i] + b > hi) hi = (double)p->mem_off[i] + b;
        }
        const kn_program_step *sp = &p->steps[s];
        fprintf(f, "%d\t%.0f\t%.0f\t%s\n", s, live, hi,
                sp->kernel >= 0 ? p->kernels[sp->kernel].ir.name : kn_op_name(p->g->nodes[sp->node].op));
    }
    return KN_OK;
}

static double type_bytes(const kn_type *t) { return (double)kn_type_numel(t) * (double)kn_dtype_size(t->dtype); }

/* The bytes step s reads and writes: every tensor once. */
static double step_bytes(const kn_program *p, const kn_program_step *sp) {
    const kn_graph *g = p->g;
    double b = 0;
    if (sp->kernel < 0) {
        const kn_node *n = &g->nodes[sp->node];
        for (int k = 0; k < n->nin; k++) {
            bool dup = false;
            for (int j = 0; j < k; j++) dup |= n->in[j] == n->in[k];
            if (!dup) b += type_bytes(&g->nodes[n->in[k]].type);
        }
        return b + type_bytes(&n->type);
    }
    const kn_kernel *k = &p->kernels[sp->kernel].ir;
    for (int i = 0; i < k->nbufs; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++) dup |= k->bufs[j].value == k->bufs[i].value;
        if (!dup) b += type_bytes(&g->nodes[k->bufs[i].value].type);
    }
    return b;
}

void kn_program_print_profile(FILE *f, const kn_program *p, int top, double copy_gbs) {
    if (!f || !p || !p->step_ms || p->runs == 0) return;
    double total = 0;
    for (int s = 0; s < p->nsteps; s++) total += p->step_ms[s];
    double gen = 0;
    for (int s = 0; s < p->nsteps; s++) gen += p->steps[s].kernel >= 0 ? p->step_ms[s] : 0;
    fprintf(f, "step profile over %d runs: %.2f ms per run (generated kernels %.2f ms, library steps %.2f ms); the %d "
            "costliest steps:\n", p->runs, total / p->runs, gen / p->runs, (total - gen) / p->runs, top);
    fprintf(f, "  %9s %6s %10s %8s%s  step\n", "ms", "share", "MB", "GB/s", copy_gbs > 0 ? " of copy" : "");
    bool *shown = kn_calloc((size_t)p->nsteps + 1, sizeof *shown);
    for (int k = 0; shown && k < top; k++) {
        int best = -1;
        for (int s = 0; s < p->nsteps; s++)
            if (!shown[s] && (best < 0 || p->step_ms[s] > p->step_ms[best])) best = s;
        if (best < 0) break;
        shown[best] = true;
        const kn_program_step *sp = &p->steps[best];
        char what[128];
        if (sp->kernel >= 0) {
            const kn_kernel *kk = &p->kernels[sp->kernel].ir;
            snprintf(what, sizeof what, "kernel %s (%lld x %lld%s)", kk->name, (long long)kk->outer_n,
                     (long long)kk->inner_n, kk->reduces ? ", reduced" : "");
        } else {
            char ts[64];
            snprintf(what, sizeof what, "%%%d = %s %s", sp->node, kn_op_name(p->g->nodes[sp->node].op),
                     kn_type_str(&p->g->nodes[sp->node].type, ts, sizeof ts));
        }
        double ms = p->step_ms[best] / p->runs, bytes = step_bytes(p, sp), gbs = ms > 0 ? bytes / (ms * 1e6) : 0;
        fprintf(f, "  %9.3f %5.1f%% %10.2f %8.2f", ms, 100 * p->step_ms[best] / total, bytes / 1e6, gbs);
        if (copy_gbs > 0) fprintf(f, " %7.0f%%", 100 * gbs / copy_gbs);
        fprintf(f, "  %d: %s\n", best, what);
    }
    kn_free(shown);
    /* the library steps by op, the generated kernels by shape: where the rest goes */
    fprintf(f, "  by kind:\n");
    bool *done = kn_calloc((size_t)p->nsteps + 1, sizeof *done);
    for (int s = 0; done && s < p->nsteps; s++) {
        if (done[s]) continue;
        const kn_program_step *a = &p->steps[s];
        double ms = 0;
        int count = 0;
        for (int t = s; t < p->nsteps; t++) {
            const kn_program_step *b = &p->steps[t];
            bool same = a->kernel >= 0 ? b->kernel >= 0 && !strcmp(p->kernels[b->kernel].fn_name, p->kernels[a->kernel].fn_name)
                                       : b->kernel < 0 && p->g->nodes[b->node].op == p->g->nodes[a->node].op;
            if (!same || done[t]) continue;
            done[t] = true;
            ms += p->step_ms[t];
            count++;
        }
        if (ms / total < 0.005) continue;
        if (a->kernel >= 0) {
            const kn_kernel *kk = &p->kernels[a->kernel].ir;
            fprintf(f, "  %9.3f %5.1f%% %4dx  kernel %s (%lld x %lld%s)\n", ms / p->runs, 100 * ms / total, count,
                    p->kernels[a->kernel].fn_name, (long long)kk->outer_n, (long long)kk->inner_n, kk->reduces ? ", reduced" : "");
        } else
            fprintf(f, "  %9.3f %5.1f%% %4dx  %s\n", ms / p->runs, 100 * ms / total, count, kn_op_name(p->g->nodes[a->node].op));
    }
    kn_free(done);
}

kn_program_stats kn_program_get_stats(const kn_program *p) {
    kn_program_stats z = {0};
    return p ? p->stats : z;
}

kn_status kn_program_print_kernels(FILE *f, const kn_program *p) {
    if (!f || !p) return kn_error(KN_ERR_ARG, "kn_program_print_kernels: NULL argument");
    if (!p->sched) return kn_error(KN_ERR_ARG, "kn_program_print_kernels: not a compiled program");
    KN_TRY(kn_schedule_print(f, p->g, p->sched));
    for (int i = 0; i < p->nkernels; i++) {
        fputc('\n', f);
        KN_TRY(kn_kernel_print(f, &p->kernels[i].ir));
        char *src = NULL;
        size_t len = 0, cap = 0;
        kn_status st = kn_render_c(&p->kernels[i].ir, &src, &len, &cap);
        if (st == KN_OK) fputs(src, f);
        kn_free(src);
        KN_TRY(st);
    }
    return KN_OK;
}

static kn_status write_text(const char *path, const char *a, const char *b) {
    FILE *f = fopen(path, "w");
    if (!f) return kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot write %s: %s", path, strerror(errno));
    fputs(a, f);
    fputs(b, f);
    return fclose(f) == 0 ? KN_OK : kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot write %s", path);
}

kn_status kn_program_emit_kernels(const kn_program *p, const char *dir) {
    if (!p || !dir) return kn_error(KN_ERR_ARG, "kn_program_emit_kernels: NULL argument");
    if (!p->sched) return kn_error(KN_ERR_ARG, "kn_program_emit_kernels: not a compiled program");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot create %s: %s", dir, strerror(errno));
    char path[1024];
    snprintf(path, sizeof path, "%s/schedule.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot write %s: %s", path, strerror(errno));
    kn_status st = kn_schedule_print(f, p->g, p->sched);
    if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot write %s", path);
    for (int i = 0; st == KN_OK && i < p->nkernels; i++) {
        const kn_kernel *k = &p->kernels[i].ir;
        snprintf(path, sizeof path, "%s/%s.kir", dir, k->name);
        if (!(f = fopen(path, "w"))) return kn_error(KN_ERR_IO, "kn_program_emit_kernels: cannot write %s", path);
        st = kn_kernel_print(f, k);
        fclose(f);
        char *src = NULL;
        size_t len = 0, cap = 0;
        if (st == KN_OK) st = kn_render_c(k, &src, &len, &cap);
        snprintf(path, sizeof path, "%s/%s.c", dir, k->name);
        if (st == KN_OK) st = write_text(path, kn_render_c_prelude(), src);
        kn_free(src);
        src = NULL;
        len = cap = 0;
        if (st == KN_OK) st = kn_render_cuda(k, KN_CUDA_NVRTC, NULL, &src, &len, &cap); /* the GPU's, for any launch */
        snprintf(path, sizeof path, "%s/%s.cu", dir, k->name);
        if (st == KN_OK) st = write_text(path, kn_render_cuda_prelude(KN_CUDA_NVRTC), src);
        kn_free(src);
    }
    return st;
}

kn_status kn_program_compare(const kn_graph *g, const kn_program_opts *o, uint64_t seed, double *maxrel,
                             kn_program_stats *stats) {
    if (!g || !maxrel) return kn_error(KN_ERR_ARG, "kn_program_compare: NULL argument");
    kn_interp *it = NULL;
    kn_program *p = NULL;
    double *x = NULL, *y = NULL;
    /* a graph with collectives (the ddp pass) runs with one process's context each; their
     * slabs are compared too */
    kn_collectives_local *la = NULL, *lb = NULL;
    kn_collectives ca, cb;
    kn_status st = kn_interp_new(&it, g);
    if (st == KN_OK) st = kn_program_compile(&p, g, o);
    if (st == KN_OK) st = kn_collectives_local_new(&la, &ca);
    if (st == KN_OK) st = kn_collectives_local_new(&lb, &cb);
    if (st == KN_OK) {
        kn_interp_set_collectives(it, &ca);
        kn_program_set_collectives(p, &cb);
    }
    /* the zero3 pass took the params away: both gather the same random parameter slab */
    int64_t np = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == KN_OP_ALL_GATHER_START && g->nodes[i].attrs.stop > np) np = g->nodes[i].attrs.stop;
    float *params = st == KN_OK && np > 0 ? kn_malloc((size_t)np * sizeof *params) : NULL;
    if (st == KN_OK && np > 0 && !params) st = kn_error(KN_ERR_OOM, "kn_program_compare: out of memory");
    if (params) {
        kn_rng r = kn_rng_new(seed);
        kn_rng_normal_f32(&r, params, np);
        st = kn_collectives_local_params(la, params, np);
        if (st == KN_OK) st = kn_collectives_local_params(lb, params, np);
        kn_free(params);
    }
    for (int i = 0; i < g->nnodes && st == KN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        st = kn_graph_random_input(g, i, seed, &t);
        if (st == KN_OK) st = kn_interp_bind(it, n->attrs.name, t);
        if (st == KN_OK) st = kn_program_bind(p, n->attrs.name, t);
        kn_tensor_free(t);
    }
    if (st == KN_OK) st = kn_interp_run(it);
    if (st == KN_OK) st = kn_program_run(p);
    double worst = 0;
    for (int i = 0; i < g->noutputs && st == KN_OK; i++) {
        kn_tensor *b = NULL;
        const kn_tensor *a = kn_interp_output(it, i);
        int64_t n = kn_tensor_numel(a);
        st = kn_tensor_to(&b, kn_program_output(p, i), KN_CPU);
        x = kn_realloc(x, sizeof *x * (size_t)(n + 1));
        y = kn_realloc(y, sizeof *y * (size_t)(n + 1));
        if (st == KN_OK && (!x || !y)) st = kn_error(KN_ERR_OOM, "kn_program_compare: out of memory");
        if (st == KN_OK) st = kn_tensor_to_f64(a, x);
        if (st == KN_OK) st = kn_tensor_to_f64(b, y);
        kn_tensor_free(b);
        for (int64_t e = 0; st == KN_OK && e < n; e++) {
            double d;
            if (isnan(x[e]) || isnan(y[e])) d = isnan(x[e]) && isnan(y[e]) ? 0 : INFINITY;
            else if (x[e] == y[e]) d = 0;
            else d = fabs(x[e] - y[e]) / (1 + fabs(x[e]));
            if (d > worst || isnan(d)) worst = d;
        }
    }
    int64_t na = 0, nb = 0;
    const float *sa = st == KN_OK ? kn_collectives_local_slab(la, &na) : NULL;
    const float *sb = st == KN_OK ? kn_collectives_local_slab(lb, &nb) : NULL;
    if (st == KN_OK && na != nb)
        st = kn_error(KN_ERR_INTERNAL, "kn_program_compare: the program stored %lld gradient floats, the interpreter "
                      "%lld", (long long)nb, (long long)na);
    for (int64_t e = 0; st == KN_OK && e < na; e++) {
        double a = sa[e], b = sb[e], d = isnan(a) || isnan(b) ? (isnan(a) && isnan(b) ? 0 : INFINITY)
                                       : a == b ? 0 : fabs(a - b) / (1 + fabs(a));
        if (d > worst || isnan(d)) worst = d;
    }
    if (st == KN_OK) {
        *maxrel = worst;
        if (stats) *stats = p->stats;
    }
    kn_free(x);
    kn_free(y);
    kn_program_free(p);
    kn_interp_free(it);
    kn_collectives_local_free(la);
    kn_collectives_local_free(lb);
    return st;
}

/* The operations of step sp, for a label: a library step's op, or "fused:" and the distinct
 * ops of a generated kernel's members in order ("fused:sub+exp+sum"), cut to fit. */
static void step_label(const kn_program *p, const kn_program_step *sp, char *buf, size_t cap) {
    const kn_graph *g = p->g;
    if (sp->kernel < 0 || !p->sched) {
        snprintf(buf, cap, "%s", kn_op_name(g->nodes[sp->node].op));
        return;
    }
    const kn_group *G = &p->sched->groups[p->sched->group_of[sp->node]];
    size_t k = (size_t)snprintf(buf, cap, "fused:");
    for (int i = 0; i < G->nnodes && k < cap; i++) {
        kn_op op = g->nodes[G->nodes[i]].op;
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= g->nodes[G->nodes[j]].op == op;
        if (!seen) k += (size_t)snprintf(buf + k, cap - k, "%s%s", buf[k - 1] == ':' ? "" : "+", kn_op_name(op));
    }
}

kn_status kn_program_roofline_tsv(FILE *f, const kn_program *p, double peak_gflops, double bw_gbs, int *nplaced,
                                  double *placed_ms) {
    if (!f || !p) return kn_error(KN_ERR_ARG, "kn_program_roofline_tsv: NULL argument");
    if (!p->step_ms || p->runs == 0)
        return kn_error(KN_ERR_ARG,
                        "kn_program_roofline_tsv: no profiled run (kn_program_set_profile, then kn_program_run)");
    if (!(peak_gflops > 0) || !(bw_gbs > 0))
        return kn_error(KN_ERR_ARG,
                        "kn_program_roofline_tsv: the roofs must be positive (peak %g GFLOP/s, bandwidth %g GB/s)",
                        peak_gflops, bw_gbs);
    const kn_graph *g = p->g;
    int placed = 0, unplaced = 0;
    double placed_s = 0, unplaced_ms = 0;
    fprintf(f, "node\top\tflops\tbytes\tintensity\tms\tgflops\troof_gflops\tof_roof\tbound\n");
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        double ms = p->step_ms[s] / p->runs, flops = 0, bytes = 0;
        if (sp->kernel >= 0) { /* the members' FLOPs; the kernel's buffers, each read or written once */
            const kn_group *G = &p->sched->groups[p->sched->group_of[sp->node]];
            for (int i = 0; i < G->nnodes; i++) flops += kn_node_cost(g, G->nodes[i]).flops;
            bytes = step_bytes(p, sp);
        } else {
            kn_cost c = kn_node_cost(g, sp->node);
            flops = c.flops, bytes = c.bytes;
        }
        if (!(ms > 0) || !(bytes > 0)) continue; /* nothing moved, or nothing measured */
        if (!(flops > 0)) { /* a copy, slice or gather: no arithmetic, no point on a log axis */
            unplaced++, unplaced_ms += ms;
            continue;
        }
        char label[64];
        step_label(p, sp, label, sizeof label);
        double ai = flops / bytes, gf = flops / (ms * 1e6), roof = ai * bw_gbs < peak_gflops ? ai * bw_gbs : peak_gflops;
        fprintf(f, "%%%d\t%s\t%.0f\t%.0f\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%s\n", sp->node, label, flops, bytes, ai, ms, gf, roof,
                gf / roof, ai < peak_gflops / bw_gbs ? "memory" : "compute");
        placed++, placed_s += ms;
    }
    fprintf(f, "# unplaced\t%d steps, %.4f ms: they move bytes without arithmetic (copies, slices, gathers)\n", unplaced,
            unplaced_ms);
    if (nplaced) *nplaced = placed;
    if (placed_ms) *placed_ms = placed_s;
    return KN_OK;
}
