/* test_nn_train.c — the trainer on a tiny GPT: it learns, its gradients agree with eager
 * mode and with finite differences, checkpoints round-trip, and a run resumed from a
 * checkpoint continues bit-identically (losses and final parameters). */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "kiln/autograd.h"
#include "kiln/data.h"
#include "kiln/nn.h"
#include "kn_test.h"

static const kn_gpt_config k_cfg = {.vocab = 7, .context = 8, .layers = 1, .width = 8, .heads = 2};
enum { B = 2, T = 8 };

/* A periodic token stream (period 5, 7 symbols): easy to learn, never trivial at step 0. */
static void stream(int32_t *toks, int n) {
    static const int32_t pat[5] = {1, 4, 2, 6, 3};
    for (int i = 0; i < n; i++) toks[i] = pat[i % 5];
}

static void ckpt_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/kiln-test-nn-%ld-%s.safetensors", (long)getpid(), tag);
}

KN_TEST(nn_train, loss_drops_on_a_pattern) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_cfg));
    kn_gpt_init(&g, 1);
    kn_trainer tr;
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_trainer_new(&tr, &g, B, T, &oc, 1.0));
    int32_t toks[200], x[B * T], y[B * T];
    stream(toks, 200);
    double first = 0, last = 0, gn;
    for (int s = 0; s < 60; s++) {
        KN_ASSERT_OK(kn_batch_sample(toks, 200, B, T, 9, 0, s, x, y));
        KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 1e-2, s == 0 ? &first : &last, &gn));
        cr_assert(isfinite(gn) && gn > 0, "gradient norm %g", gn);
    }
    cr_assert(first > 1.5 && last < 0.5 * first, "loss %g -> %g: the model must learn a period-5 pattern", first, last);
    double ev;
    KN_ASSERT_OK(kn_trainer_eval(&tr, x, y, &ev));
    cr_assert(ev < 0.5 * first, "eval loss %g", ev);
    /* greedy sampling continues the pattern */
    int32_t ids[12] = {1, 4, 2};
    kn_rng r = kn_rng_new(3);
    KN_ASSERT_OK(kn_gpt_sample(&g, ids, 3, 12, 0.0, &r));
    for (int i = 3; i < 12; i++) cr_assert_eq(ids[i], toks[i], "sampled %d at %d, pattern says %d", ids[i], i, toks[i]);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}

/* The joint graph's gradients equal eager-mode kn_backward's, and a few coordinates match
 * central finite differences of the loss (f32, so a loose tolerance). */
KN_TEST(nn_train, gradients_eager_graph_and_finite_differences) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_cfg));
    kn_gpt_init(&g, 2);
    for (int64_t i = 0; i < g.p.n_decay; i++) g.p.data[i] *= 10; /* a less flat loss */
    kn_trainer tr;
    kn_optim_config oc = {.kind = KN_OPTIM_SGD};
    KN_ASSERT_OK(kn_trainer_new(&tr, &g, B, T, &oc, 0.0));
    int32_t toks[64], x[B * T], y[B * T];
    stream(toks, 64);
    KN_ASSERT_OK(kn_batch_sample(toks, 64, B, T, 1, 0, 0, x, y));
    /* lr 0: a step that only computes the gradient into tr.grad */
    double loss;
    KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 0.0, &loss, NULL));
    const float *grad = kn_tensor_data(tr.grad);

    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val pv[32], lg, ls, gv[32];
    int64_t s[2] = {B, T};
    kn_tensor *tx, *ty;
    KN_ASSERT_OK(kn_tensor_from_data(&tx, KN_DT_I32, 2, s, x));
    KN_ASSERT_OK(kn_tensor_from_data(&ty, KN_DT_I32, 2, s, y));
    KN_ASSERT_OK(kn_gpt_build(b, &g, kn_input(b, "idx", tx), kn_input(b, "targets", ty), pv, &lg, &ls));
    KN_ASSERT_OK(kn_backward(b, ls, g.p.count, pv, gv));
    double eager_loss;
    KN_ASSERT_OK(kn_tensor_item(kn_val_tensor(b, ls), &eager_loss));
    cr_assert(eager_loss == loss, "eager loss %.17g, graph loss %.17g", eager_loss, loss);
    for (int i = 0; i < g.p.count; i++) {
        const kn_tensor *ge = kn_val_tensor(b, gv[i]);
        cr_assert(memcmp(kn_tensor_data(ge), grad + g.p.info[i].offset, (size_t)g.p.info[i].numel * 4) == 0,
                  "gradient of %s: eager and graph differ", g.p.info[i].name);
    }
    kn_builder_free(b);

    /* finite differences on the 6 largest gradient coordinates */
    for (int k = 0; k < 6; k++) {
        int64_t best = 0;
        for (int64_t i = 1; i < g.p.n; i++)
            if (fabsf(grad[i]) > fabsf(grad[best])) best = i;
        float keep = g.p.data[best], h = 1e-2f;
        double lp, lm;
        g.p.data[best] = keep + h;
        KN_ASSERT_OK(kn_trainer_eval(&tr, x, y, &lp));
        g.p.data[best] = keep - h;
        KN_ASSERT_OK(kn_trainer_eval(&tr, x, y, &lm));
        g.p.data[best] = keep;
        double fd = (lp - lm) / (2.0 * h);
        KN_ASSERT_CLOSE(grad[best], fd, 2e-3, 5e-2);
        ((float *)kn_tensor_data(tr.grad))[best] = 0; /* next largest */
    }
    kn_tensor_free(tx); kn_tensor_free(ty);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}

/* Run steps [from, to) of a fixed schedule, appending each loss to losses[]. */
static void run_steps(kn_trainer *tr, const int32_t *toks, int n, int from, int to, double *losses) {
    kn_lr_schedule sch = {.lr = 1e-2, .min_lr = 1e-3, .warmup = 3, .total = 12};
    int32_t x[B * T], y[B * T];
    for (int s = from; s < to; s++) {
        KN_ASSERT_OK(kn_batch_sample(toks, n, B, T, 77, 0, s, x, y));
        KN_ASSERT_OK(kn_trainer_step(tr, x, y, kn_lr_at(&sch, s), &losses[s], NULL));
    }
}

KN_TEST(nn_train, resume_is_bit_identical) {
    int32_t toks[300];
    for (int i = 0; i < 300; i++) toks[i] = (i * i + 3 * i) % 7; /* something less regular */
    kn_optim_config oc = kn_optim_default();
    double straight[12], resumed[12];
    /* straight: 12 steps */
    kn_gpt a;
    KN_ASSERT_OK(kn_gpt_new(&a, &k_cfg));
    kn_gpt_init(&a, 5);
    kn_trainer ta;
    KN_ASSERT_OK(kn_trainer_new(&ta, &a, B, T, &oc, 1.0));
    run_steps(&ta, toks, 300, 0, 12, straight);
    /* 6 steps, checkpoint, a fresh process-like start from the checkpoint, 6 more */
    char path[128];
    ckpt_path(path, sizeof path, "resume");
    kn_gpt b;
    KN_ASSERT_OK(kn_gpt_new(&b, &k_cfg));
    kn_gpt_init(&b, 5);
    kn_trainer tb;
    KN_ASSERT_OK(kn_trainer_new(&tb, &b, B, T, &oc, 1.0));
    run_steps(&tb, toks, 300, 0, 6, resumed);
    const char *k[1] = {"test.note"}, *v[1] = {"half way"};
    KN_ASSERT_OK(kn_checkpoint_save(path, &b, &tb.opt, 1, k, v));
    kn_trainer_free(&tb);
    kn_gpt_free(&b);

    kn_gpt_config cfg;
    KN_ASSERT_OK(kn_checkpoint_config(path, &cfg));
    cr_assert(memcmp(&cfg, &k_cfg, sizeof cfg) == 0, "the config comes back from the metadata");
    kn_gpt c;
    KN_ASSERT_OK(kn_gpt_new(&c, &cfg));
    kn_gpt_init(&c, 999); /* different weights, all overwritten by the load */
    kn_trainer tc;
    KN_ASSERT_OK(kn_trainer_new(&tc, &c, B, T, &oc, 1.0));
    kn_safetensors st;
    KN_ASSERT_OK(kn_checkpoint_load(path, &c, &tc.opt, &st));
    cr_assert_str_eq(kn_safetensors_meta(&st, "test.note"), "half way");
    cr_assert_str_eq(kn_safetensors_meta(&st, "kiln.optim.step"), "6");
    kn_safetensors_free(&st);
    cr_assert_eq(tc.opt.step, 6);
    run_steps(&tc, toks, 300, 6, 12, resumed);
    for (int s = 0; s < 12; s++)
        cr_assert(straight[s] == resumed[s], "step %d: loss %.17g straight, %.17g resumed", s, straight[s], resumed[s]);
    cr_assert(memcmp(a.p.data, c.p.data, (size_t)a.p.n * sizeof(float)) == 0, "final parameters differ");
    cr_assert(memcmp(ta.opt.state, tc.opt.state, (size_t)ta.opt.state_len * sizeof(float)) == 0,
              "final optimizer state differs");
    kn_trainer_free(&ta);
    kn_trainer_free(&tc);
    kn_gpt_free(&a);
    kn_gpt_free(&c);
    remove(path);
}

/* Training in eager mode (rebuilt op by op, kn_backward on the tape) and in graph mode
 * (the compiled joint graph replayed) gives the same losses and parameters, bit for bit. */
KN_TEST(nn_train, eager_training_equals_graph_training) {
    int32_t toks[300];
    for (int i = 0; i < 300; i++) toks[i] = (i * i + 3 * i) % 7;
    kn_optim_config oc = kn_optim_default();
    double lg[12], le[12];
    kn_gpt a, b;
    KN_ASSERT_OK(kn_gpt_new(&a, &k_cfg));
    KN_ASSERT_OK(kn_gpt_new(&b, &k_cfg));
    kn_gpt_init(&a, 8);
    kn_gpt_init(&b, 8);
    kn_trainer ta, tb;
    KN_ASSERT_OK(kn_trainer_new(&ta, &a, B, T, &oc, 1.0));
    KN_ASSERT_OK(kn_trainer_new(&tb, &b, B, T, &oc, 1.0));
    tb.eager = true;
    run_steps(&ta, toks, 300, 0, 5, lg);
    run_steps(&tb, toks, 300, 0, 5, le);
    for (int s = 0; s < 5; s++) cr_assert(lg[s] == le[s], "step %d: graph %.17g, eager %.17g", s, lg[s], le[s]);
    cr_assert(memcmp(a.p.data, b.p.data, (size_t)a.p.n * sizeof(float)) == 0, "parameters differ");
    kn_trainer_free(&ta);
    kn_trainer_free(&tb);
    kn_gpt_free(&a);
    kn_gpt_free(&b);
}

KN_TEST(nn_train, checkpoint_errors) {
    char path[128];
    ckpt_path(path, sizeof path, "err");
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_cfg));
    kn_gpt_init(&g, 1);
    KN_ASSERT_OK(kn_checkpoint_save(path, &g, NULL, 0, NULL, NULL));
    /* another shape */
    kn_gpt_config other = k_cfg;
    other.width = 16;
    kn_gpt h;
    KN_ASSERT_OK(kn_gpt_new(&h, &other));
    KN_ASSERT_ERR(kn_checkpoint_load(path, &h, NULL, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "width 8") && strstr(kn_last_error(), "width 16"), "%s", kn_last_error());
    kn_gpt_free(&h);
    /* no optimizer state saved, but asked for */
    kn_optim o;
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_optim_init(&o, &oc, g.p.n, g.p.n_decay));
    KN_ASSERT_ERR(kn_checkpoint_load(path, &g, &o, NULL), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "optimizer state") != NULL, "%s", kn_last_error());
    kn_optim_free(&o);
    /* a safetensors file that is not a kiln checkpoint */
    float one = 1;
    kn_st_tensor t = {.name = "w", .dtype = KN_DT_F32, .ndim = 1, .shape = {1}, .data = &one, .nbytes = 4};
    KN_ASSERT_OK(kn_safetensors_write(path, 1, &t, 0, NULL));
    kn_gpt_config cfg;
    KN_ASSERT_ERR(kn_checkpoint_config(path, &cfg), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "kiln.vocab") != NULL, "%s", kn_last_error());
    /* a parameter with the wrong shape */
    kn_gpt_free(&g);
    remove(path);
}

/* The gradient-sync hook runs once per step between backward and the update, sees the
 * filled gradient slab, and what it does to the slab is what the optimizer uses; an error
 * from it fails the step before any update. (Distributed training plugs in here.) */
typedef struct hook_probe { int calls; double scale; kn_status fail; } hook_probe;
static kn_status halve_grad(kn_trainer *t, float *grad, int64_t n, void *ctx) {
    hook_probe *h = ctx;
    cr_assert_eq(n, t->model->p.n);
    h->calls++;
    double ss = 0;
    for (int64_t i = 0; i < n; i++) { ss += (double)grad[i] * grad[i]; grad[i] = (float)(grad[i] * h->scale); }
    cr_assert(ss > 0, "the hook sees the gradients");
    return h->fail == KN_OK ? KN_OK : kn_error(h->fail, "hook failed");
}

KN_TEST(nn_train, gradient_sync_hook_runs_between_backward_and_update) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_cfg));
    kn_gpt_init(&g, 2);
    kn_trainer tr;
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_trainer_new(&tr, &g, B, T, &oc, 0.0));
    int32_t toks[200], x[B * T], y[B * T];
    stream(toks, 200);
    KN_ASSERT_OK(kn_batch_sample(toks, 200, B, T, 9, 0, 0, x, y));
    hook_probe h = {0, 0.5, KN_OK};
    tr.grad_hook = halve_grad;
    tr.grad_hook_ctx = &h;
    double l, n1, n2;
    KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 0.0, &l, &n1));
    tr.grad_hook = NULL;
    KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 0.0, &l, &n2)); /* lr 0: same parameters, same gradients */
    cr_assert_eq(h.calls, 1);
    cr_assert(fabs(n1 - 0.5 * n2) <= 1e-6 * n2, "norm after the hook %g, without %g", n1, n2);
    tr.grad_hook = halve_grad;
    h.fail = KN_ERR_IO;
    int64_t step = tr.opt.step;
    KN_ASSERT_ERR(kn_trainer_step(&tr, x, y, 1e-2, &l, NULL), KN_ERR_IO);
    cr_assert_eq(tr.opt.step, step, "no update after a failed hook");
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}
