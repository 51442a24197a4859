/* kn_out_program.h — a graph compiled by kiln (the student's units inside its scheduler,
 * renderer or launcher) against the interpreter, with the program's results through kn_out
 * (kn_out.h): the helper lab tests share so that the grader's checker judges the student's
 * program, not its own.
 *
 * Why not kn_program_compare: it compiles, runs and compares in one call, so the checker
 * (the staff's build of the test) would judge the staff's program. Here the producer
 * compiles and runs the program and writes every output (as doubles) and the program's
 * stats; the checker compiles and runs nothing of the student's, only the interpreter, and
 * measures the producer's outputs against it. Criterion tests only (cr_assert).
 * kn_out_graph passes a graph the student's code made (a pass's result, a recorded graph)
 * the same way, as the IR text kiln prints and parses; kn_out_tensor a tensor (an eager
 * value, an interpreter's output) as its type and values. */
#ifndef KN_OUT_PROGRAM_H
#define KN_OUT_PROGRAM_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/program.h"
#include "kiln/randgraph.h"

/* The program compiled from g with opts o against the interpreter on the same random
 * inputs (kn_graph_random_input, seed): the largest |a - b| / (1 + |a|) over every output
 * element (NaN against NaN 0, against a number +inf), as kn_program_compare measures it
 * for graphs without collectives (asserted). *st (may be NULL): the program's stats, the
 * producer's in the checker. Fails the test on an error of either side. */
static inline double kn_out_compare(const kn_graph *g, const kn_program_opts *o, uint64_t seed, kn_program_stats *st) {
    const bool mine = !kn_out_checking();
    kn_interp *it = NULL;
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    if (mine) KN_ASSERT_OK(kn_program_compile(&p, g, o));
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        cr_assert(n->op != KN_OP_ALL_GATHER_START && n->op != KN_OP_ALL_REDUCE_START, "kn_out_compare: no collectives");
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        KN_ASSERT_OK(kn_graph_random_input(g, i, seed, &t));
        KN_ASSERT_OK(kn_interp_bind(it, n->attrs.name, t));
        if (mine) KN_ASSERT_OK(kn_program_bind(p, n->attrs.name, t));
        kn_tensor_free(t);
    }
    KN_ASSERT_OK(kn_interp_run(it));
    if (mine) KN_ASSERT_OK(kn_program_run(p));
    double worst = 0;
    for (int i = 0; i < g->noutputs; i++) {
        const kn_tensor *a = kn_interp_output(it, i);
        int64_t n = kn_tensor_numel(a);
        double *x = malloc(sizeof *x * (size_t)(n + 1)), *y = calloc((size_t)n + 1, sizeof *y);
        cr_assert(x && y, "kn_out_compare: out of memory");
        KN_ASSERT_OK(kn_tensor_to_f64(a, x));
        if (mine) {
            kn_tensor *b = NULL;
            KN_ASSERT_OK(kn_tensor_to(&b, kn_program_output(p, i), KN_CPU));
            KN_ASSERT_OK(kn_tensor_to_f64(b, y));
            kn_tensor_free(b);
        }
        kn_out("the compiled program's output", y, (size_t)n * sizeof *y);
        for (int64_t e = 0; e < n; e++) {
            double d;
            if (isnan(x[e]) || isnan(y[e])) d = isnan(x[e]) && isnan(y[e]) ? 0 : INFINITY;
            else if (x[e] == y[e]) d = 0;
            else d = fabs(x[e] - y[e]) / (1 + fabs(x[e]));
            if (d > worst || isnan(d)) worst = d;
        }
        free(x);
        free(y);
    }
    if (st) {
        *st = mine ? kn_program_get_stats(p) : (kn_program_stats){0};
        kn_out("the compiled program's stats", st, sizeof *st);
    }
    kn_program_free(p);
    kn_interp_free(it);
    return worst;
}

/* A malloc'd text *buf of *len bytes (NUL-terminated, as open_memstream makes it) through
 * kn_out: the checker frees its own and takes a malloc'd copy of the producer's. */
static inline void kn_out_malloc_text(const char *what, char **buf, size_t *len) {
    int64_t n = kn_out_i64(what, *buf ? (int64_t)*len : -1);
    if (!kn_out_checking()) {
        if (*buf) kn_out(what, *buf, *len);
        return;
    }
    free(*buf);
    *buf = NULL;
    *len = 0;
    if (n < 0) return;
    cr_assert(n < ((int64_t)1 << 28), "%s: a text of %lld bytes", what, (long long)n);
    *buf = calloc((size_t)n + 1, 1);
    cr_assert(*buf, "kn_out_malloc_text: out of memory");
    kn_out(what, *buf, (size_t)n);
    *len = (size_t)n;
}

/* The graph *g (NULL allowed) through kn_out as its text (kn_graph_to_string): the producer
 * writes it; the checker frees its own *g and parses the producer's text in its place, so
 * the checks that follow see the student's graph (a text the parser refuses fails the
 * test: no graph of the student's printed it). */
static inline void kn_out_graph(const char *what, kn_graph **g) {
    const bool mine = !kn_out_checking();
    char *text = NULL;
    int64_t len = -1; /* -1: no graph */
    if (mine && *g) {
        KN_ASSERT_OK(kn_graph_to_string(*g, &text));
        len = (int64_t)strlen(text);
    }
    len = kn_out_i64(what, len);
    if (mine) {
        if (text) kn_out(what, text, (size_t)len);
        kn_free(text);
        return;
    }
    kn_graph_free(*g);
    *g = NULL;
    if (len < 0) return;
    cr_assert(len < ((int64_t)1 << 28), "%s: a graph text of %lld bytes", what, (long long)len);
    char *buf = calloc((size_t)len + 1, 1);
    cr_assert(buf, "kn_out_graph: out of memory");
    kn_out(what, buf, (size_t)len);
    kn_status st = kn_graph_parse(buf, (size_t)len, g);
    free(buf);
    KN_ASSERT_OK(st);
}

/* The tensor t (NULL allowed; on the CPU) through kn_out as its type and its values (a
 * row-major copy's bytes): the producer writes them and returns t; the checker returns a
 * new row-major tensor holding the producer's (never freed: tests borrow it as they borrow
 * a builder's or an interpreter's tensors), or NULL when the producer's was NULL. */
static inline const kn_tensor *kn_out_tensor(const char *what, const kn_tensor *t) {
    const bool mine = !kn_out_checking();
    int32_t has = mine && t != NULL;
    kn_out(what, &has, sizeof has);
    if (!has) return mine ? t : NULL;
    kn_type ty;
    memset(&ty, 0, sizeof ty);
    if (mine) {
        ty.dtype = t->dtype, ty.ndim = t->ndim;
        memcpy(ty.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    kn_out(what, &ty, sizeof ty);
    if (mine) {
        kn_tensor *c = NULL;
        KN_ASSERT_OK(kn_tensor_contiguous(&c, t));
        kn_out(what, kn_tensor_data(c), (size_t)kn_tensor_numel(c) * kn_dtype_size(c->dtype));
        kn_tensor_free(c);
        return t;
    }
    int64_t n = 1;
    cr_assert(ty.ndim >= 0 && ty.ndim <= KN_MAX_DIMS && ty.dtype >= 0 && ty.dtype < KN_DT_COUNT,
              "%s: your run's tensor has a bad type", what);
    for (int d = 0; d < ty.ndim; d++) {
        cr_assert(ty.shape[d] >= 0 && ty.shape[d] <= (1 << 24), "%s: your run's tensor has a bad shape", what);
        n *= ty.shape[d];
    }
    cr_assert(n <= (1 << 24), "%s: your run's tensor has %lld elements", what, (long long)n);
    kn_tensor *c = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&c, ty.dtype, ty.ndim, ty.shape));
    kn_out(what, kn_tensor_data(c), (size_t)n * kn_dtype_size(ty.dtype));
    return c;
}

#endif
