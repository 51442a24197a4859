/* pass_step_util.h — for the tests of passes on a training step (test_remat.c,
 * test_flash.c): three AdamW steps of a GPT with a pass list. (Binding two interpreters
 * to the same random inputs is graph_test_util.h's bind_same_random.) */
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

#endif
