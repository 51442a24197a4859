/* train_modes.h — for the compiled-program tests (test_codegen.c, test_cudagen.c): ten
 * AdamW steps of a tiny GPT on dev, node by node and compiled, must give the same losses
 * within 1e-4 (the generated kernels sum in another order than the interpreter's). */
#ifndef KN_TRAIN_MODES_H
#define KN_TRAIN_MODES_H

#include <math.h>

#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/program.h"

static inline void kn_test_compiled_training_follows(const kn_gpt_config *c, kn_device dev) {
    double loss[2][10];
    for (int mode = 0; mode < 2; mode++) {
        kn_gpt model;
        KN_ASSERT_OK(kn_gpt_new(&model, c));
        kn_gpt_init(&model, 1234);
        kn_optim_config oc = kn_optim_default();
        kn_trainer t;
        KN_ASSERT_OK(kn_trainer_new(&t, &model, 2, 8, &oc, 1.0));
        KN_ASSERT_OK(kn_trainer_to_device(&t, dev));
        KN_ASSERT_OK(kn_trainer_set_compiled(&t, mode == 1));
        cr_assert_eq(kn_program_get_stats(t.prog).mode, mode ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES);
        int32_t x[16], y[16];
        for (int step = 0; step < 10; step++) {
            for (int i = 0; i < 16; i++) { x[i] = (i * 7 + step * 3) % c->vocab; y[i] = (i * 5 + step) % c->vocab; }
            KN_ASSERT_OK(kn_trainer_step(&t, x, y, 1e-2, &loss[mode][step], NULL));
        }
        kn_trainer_free(&t);
        kn_gpt_free(&model);
    }
    for (int s = 0; s < 10; s++)
        cr_assert(fabs(loss[0][s] - loss[1][s]) <= 1e-4 * (1 + fabs(loss[0][s])), "step %d: loss %.9g node by node, %.9g "
                  "compiled", s, loss[0][s], loss[1][s]);
}

#endif
