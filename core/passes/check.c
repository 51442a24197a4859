/* check.c — does a rewritten graph still compute the same numbers? Run the graph before
 * and after on the same random inputs and measure the largest difference of the outputs.
 *
 * This is how every pass is tested (on hundreds of random graphs) and what `kiln compile`
 * reports as max |Δ|. Floats are drawn uniform in [-1, 1) from a Philox stream per input
 * (so the draw of one input does not depend on the others). Integer inputs are indices:
 * they are drawn in [0, bound) where bound is the smallest range any user accepts (an
 * embedding's vocabulary, a cross-entropy's classes); an index nobody bounds gets [0, 2). */
#include <math.h>
#include <string.h>

#include "kiln/passes.h"

/* The range an integer input v of g may take. */
static int64_t index_bound(const kn_graph *g, int32_t v) {
    int64_t bound = INT64_MAX;
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] != v) continue;
            int64_t b = INT64_MAX;
            if (n->op == KN_OP_EMBEDDING && k == 1) b = g->nodes[n->in[0]].type.shape[0];
            else if (n->op == KN_OP_EMBEDDING_GRAD && k == 1) b = n->attrs.shape[0];
            else if (n->op == KN_OP_CROSS_ENTROPY && k == 1) {
                const kn_type *t = &g->nodes[n->in[0]].type;
                b = t->shape[t->ndim - 1];
            } else if (n->op == KN_OP_CROSS_ENTROPY_BWD && k == 2) {
                const kn_type *t = &g->nodes[n->in[1]].type;
                b = t->shape[t->ndim - 1];
            }
            if (b < bound) bound = b;
        }
    }
    return bound == INT64_MAX || bound < 1 ? 2 : bound;
}

kn_status kn_graph_random_input(const kn_graph *g, int32_t v, uint64_t seed, kn_tensor **out) {
    const kn_type *t = &g->nodes[v].type;
    int64_t n = kn_type_numel(t);
    double *buf = kn_malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) return kn_error(KN_ERR_OOM, "kn_graph_compare: out of memory");
    kn_rng r = kn_rng_new(seed);
    r.stream = (uint64_t)v + 1;
    kn_rng_uniform_f64(&r, buf, n);
    bool is_float = kn_dtype_is_float(t->dtype);
    int64_t bound = is_float ? 0 : t->dtype == KN_DT_BOOL ? 2 : index_bound(g, v);
    for (int64_t i = 0; i < n; i++) buf[i] = is_float ? 2 * buf[i] - 1 : floor(buf[i] * (double)bound);
    kn_status st = kn_tensor_from_f64(out, t->dtype, t->ndim, t->shape, buf);
    kn_free(buf);
    return st;
}

/* The largest |x - y| over n pairs, with NaN against NaN and equal infinities 0. */
static double max_diff(const double *x, const double *y, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d;
        if (isnan(x[i]) || isnan(y[i])) d = isnan(x[i]) && isnan(y[i]) ? 0 : INFINITY;
        else if (x[i] == y[i]) d = 0; /* equal infinities too */
        else d = fabs(x[i] - y[i]);
        if (d > m || isnan(d)) m = d;
    }
    return m;
}

static bool has_collectives(const kn_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (kn_op_get(g->nodes[i].op)->category == KN_CAT_COLLECTIVE) return true;
    return false;
}

/* The largest difference between x (n values) and the tensor t, or slab[off, off + n). */
static kn_status diff_into(const kn_tensor *ta, const kn_tensor *tb, const float *slab, int64_t off, int64_t n,
                          double *m) {
    double *x = kn_malloc((size_t)(n ? n : 1) * sizeof *x), *y = kn_malloc((size_t)(n ? n : 1) * sizeof *y);
    kn_status st = x && y ? KN_OK : kn_error(KN_ERR_OOM, "kn_graph_compare: out of memory");
    if (st == KN_OK) st = kn_tensor_to_f64(ta, x);
    if (st == KN_OK && tb) st = kn_tensor_to_f64(tb, y);
    for (int64_t i = 0; st == KN_OK && !tb && i < n; i++) y[i] = slab[off + i];
    if (st == KN_OK) {
        double d = max_diff(x, y, n);
        if (d > *m || isnan(d)) *m = d;
    }
    kn_free(x);
    kn_free(y);
    return st;
}

/* The parameter slab of a's f32 params in definition order (their random values), which
 * one process's all_gathers give a graph whose params the zero3 pass sharded. */
static kn_status local_params(const kn_graph *a, uint64_t seed, kn_collectives_local *l) {
    int64_t n = 0, at = 0;
    for (int i = 0; i < a->nnodes; i++)
        if (a->nodes[i].op == KN_OP_PARAM && a->nodes[i].type.dtype == KN_DT_F32) n += kn_type_numel(&a->nodes[i].type);
    float *slab = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof *slab);
    kn_status st = slab ? KN_OK : kn_error(KN_ERR_OOM, "kn_graph_compare: out of memory");
    for (int i = 0; st == KN_OK && i < a->nnodes; i++) {
        if (a->nodes[i].op != KN_OP_PARAM || a->nodes[i].type.dtype != KN_DT_F32) continue;
        kn_tensor *t = NULL;
        st = kn_graph_random_input(a, i, seed, &t);
        if (st == KN_OK) memcpy(slab + at, kn_tensor_data(t), (size_t)kn_tensor_numel(t) * sizeof(float));
        at += kn_type_numel(&a->nodes[i].type);
        kn_tensor_free(t);
    }
    if (st == KN_OK) st = kn_collectives_local_params(l, slab, n);
    kn_free(slab);
    return st;
}

/* A graph with collectives (the ddp pass) runs with one process's context
 * (kn_collectives_local); against a graph without them, its gradients are the slab's:
 * output i >= 1 of a is compared with the slab's floats at the sum of the earlier
 * outputs' sizes, and b's outputs after the loss are tokens. */
kn_status kn_graph_compare(const kn_graph *a, const kn_graph *b, uint64_t seed, double *maxdiff) {
    if (!a || !b || !maxdiff) return kn_error(KN_ERR_ARG, "kn_graph_compare: NULL argument");
    bool slab = has_collectives(b) && !has_collectives(a);
    if (slab ? a->noutputs < 1 || b->noutputs < 1 : a->noutputs != b->noutputs)
        return kn_error(KN_ERR_ARG, "kn_graph_compare: %d outputs against %d", a->noutputs, b->noutputs);
    for (int i = 0; i < (slab ? 1 : a->noutputs); i++) {
        const kn_type *ta = &a->nodes[a->outputs[i]].type, *tb = &b->nodes[b->outputs[i]].type;
        if (!kn_type_equal(ta, tb)) {
            char sa[96], sb[96];
            return kn_error(KN_ERR_ARG, "kn_graph_compare: output %d is %s in one graph and %s in the other", i,
                            kn_type_str(ta, sa, sizeof sa), kn_type_str(tb, sb, sizeof sb));
        }
    }
    kn_interp *ia = NULL, *ib = NULL;
    kn_collectives_local *la = NULL, *lb = NULL;
    kn_collectives ca, cb;
    kn_status st = kn_interp_new(&ia, a);
    if (st == KN_OK) st = kn_interp_new(&ib, b);
    if (st == KN_OK && has_collectives(a) && (st = kn_collectives_local_new(&la, &ca)) == KN_OK)
        kn_interp_set_collectives(ia, &ca);
    if (st == KN_OK && has_collectives(b) && (st = kn_collectives_local_new(&lb, &cb)) == KN_OK)
        kn_interp_set_collectives(ib, &cb);
    for (int i = 0; i < a->nnodes && st == KN_OK; i++) {
        const kn_node *n = &a->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        st = kn_graph_random_input(a, i, seed, &t);
        if (st == KN_OK) st = kn_interp_bind(ia, n->attrs.name, t);
        if (st == KN_OK && kn_graph_find(b, n->attrs.name) >= 0) st = kn_interp_bind(ib, n->attrs.name, t);
        for (int k = 0; k < 2 && st == KN_OK && n->op == KN_OP_PARAM; k++) { /* lowparams' copies: the rounded param */
            kn_dtype low = k ? KN_DT_F16 : KN_DT_BF16;
            char name[KN_NAME_MAX];
            kn_tensor *c = NULL;
            if (kn_lowparam_name(n->attrs.name, low, name) != KN_OK || kn_graph_find(b, name) < 0) continue;
            st = kn_tensor_cast(&c, t, low);
            if (st == KN_OK) st = kn_interp_bind(ib, name, c);
            kn_tensor_free(c);
        }
        kn_tensor_free(t);
    }
    if (st == KN_OK && lb) st = local_params(a, seed, lb);
    if (st == KN_OK) st = kn_interp_run(ia);
    if (st == KN_OK) st = kn_interp_run(ib);
    double m = 0;
    int64_t off = 0, slab_n = 0;
    const float *sl = slab && st == KN_OK ? kn_collectives_local_slab(lb, &slab_n) : NULL;
    for (int i = 0; i < a->noutputs && st == KN_OK; i++) {
        int64_t n = kn_type_numel(&a->nodes[a->outputs[i]].type);
        if (slab && i > 0 && off + n > slab_n)
            st = kn_error(KN_ERR_ARG, "kn_graph_compare: output %d's gradient is not in the slab (%lld floats stored)",
                          i, (long long)slab_n);
        if (st == KN_OK)
            st = diff_into(kn_interp_output(ia, i), slab && i > 0 ? NULL : kn_interp_output(ib, i), sl, off, n, &m);
        if (i > 0) off += n;
    }
    if (slab && st == KN_OK && off != slab_n)
        st = kn_error(KN_ERR_ARG, "kn_graph_compare: the slab holds %lld floats, the gradients %lld", (long long)slab_n,
                      (long long)off);
    kn_interp_free(ia);
    kn_interp_free(ib);
    kn_collectives_local_free(la);
    kn_collectives_local_free(lb);
    if (st == KN_OK) *maxdiff = m;
    return st;
}
