/* pass_step_util.h — for the tests of passes on a training step (test_remat.c,
 * test_flash.c, test_epilogue.c, test_hfuse.c): three AdamW steps of a GPT with a pass
 * list, and a pass run under injected allocation failures. (Binding two interpreters to
 * the same random inputs is graph_test_util.h's bind_same_random.) */
#ifndef KN_PASS_STEP_UTIL_H
#define KN_PASS_STEP_UTIL_H

#include <string.h>

#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/passes.h"

/* Three AdamW steps (lr 1e-2) of a GPT of cfg initialized with seed 3, batch B x T, with
 * the pass list `passes` (NULL: none), node by node or compiled: losses[3] and the final
 * parameters (params: the slab's size). Batches are fixed functions of the position. */
static inline void kn_test_train3(const kn_gpt_config *cfg, int B, int T, const char *passes, bool compiled,
                                  double *losses, float *params) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, cfg));
    kn_gpt_init(&g, 3);
    kn_trainer tr;
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_trainer_new(&tr, &g, B, T, &oc, 1.0));
    tr.passes = passes;
    KN_ASSERT_OK(kn_trainer_set_compiled(&tr, compiled));
    int32_t *x = malloc((size_t)(2 * B * T) * sizeof *x), *y = x + B * T;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < B * T; i++) x[i] = (i * 7 + s * 3) % cfg->vocab, y[i] = (i * 5 + s + 1) % cfg->vocab;
        KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 1e-2, &losses[s], NULL));
    }
    memcpy(params, g.p.data, (size_t)g.p.n * sizeof *params);
    free(x);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}

/* kn_test_train3 with the pass list `a`, then with `b`, from the same start: losses la[3] and
 * lb[3], parameters *pa and *pb (malloc'd; the caller frees both). Returns their count. */
static inline size_t kn_test_train3_both(const kn_gpt_config *cfg, int B, int T, const char *a, const char *b,
                                         bool compiled, double *la, double *lb, float **pa, float **pb) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, cfg));
    size_t n = (size_t)g.p.n;
    kn_gpt_free(&g);
    *pa = malloc(n * sizeof **pa);
    *pb = malloc(n * sizeof **pb);
    kn_test_train3(cfg, B, T, a, compiled, la, *pa);
    kn_test_train3(cfg, B, T, b, compiled, lb, *pb);
    return n;
}

/* Three AdamW steps with the pass list `passes` follow the run without it, node by node and
 * compiled: losses within loss_rtol (relative), parameters within param_atol (absolute). */
static inline void kn_test_train3_follows(const kn_gpt_config *cfg, int B, int T, const char *passes, double loss_rtol,
                                          double param_atol) {
    for (int compiled = 0; compiled < 2; compiled++) {
        float *p0, *p1;
        double l0[3], l1[3];
        size_t n = kn_test_train3_both(cfg, B, T, NULL, passes, compiled, l0, l1, &p0, &p1);
        for (int s = 0; s < 3; s++) KN_ASSERT_CLOSE(l1[s], l0[s], 0, loss_rtol);
        for (size_t i = 0; i < n; i++) KN_ASSERT_CLOSE(p1[i], p0[i], param_atol, 0);
        free(p0);
        free(p1);
    }
}

/* pass run on copies of g with the k-th allocation failing, k = 0, 1, ...: each time
 * KN_ERR_OOM, the copy unchanged and nothing leaked, until it succeeds; returns that
 * (rewritten) copy for the caller to check and free. */
static inline kn_graph *kn_test_pass_under_allocation_failures(const kn_graph *g,
                                                               kn_status (*pass)(kn_graph *, kn_pass_stats *)) {
    char *before = NULL;
    KN_ASSERT_OK(kn_graph_to_string(g, &before));
    for (long k = 0;; k++) {
        kn_graph *c;
        KN_ASSERT_OK(kn_graph_copy(&c, g));
        long live = kn_alloc_live();
        kn_pass_stats st;
        memset(&st, 0, sizeof st);
        kn_alloc_fail_after(k);
        kn_status s = pass(c, &st);
        kn_alloc_fail_after(-1);
        if (s == KN_OK) {
            cr_assert(k > 0, "the pass allocates nothing?");
            kn_free(before);
            return c;
        }
        cr_assert_eq(s, KN_ERR_OOM, "allocation %ld: %s", k, kn_last_error());
        cr_assert_eq(kn_alloc_live(), live, "allocation %ld: a leak", k);
        char *after = NULL;
        KN_ASSERT_OK(kn_graph_to_string(c, &after));
        cr_assert_str_eq(after, before, "allocation %ld: the graph changed", k);
        kn_free(after);
        kn_graph_free(c);
    }
}

#endif
