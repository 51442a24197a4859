/* probe.c — look inside one training step without taking it: the loss, the unclipped
 * gradient of every parameter and the logits of a batch, computed where the trainer runs
 * (contract of kn_trainer_probe in kiln/nn.h).
 *
 * This is what a correctness check against another framework needs (`kiln dump`,
 * plots/torch_agree.py): the gradients come from the trainer's own compiled joint graph
 * (the very graph kn_trainer_step replays), so a check of them is a check of training.
 * The logits are not an output of that graph, so they come from a second, forward-only
 * graph of the same model built here; it runs the same kernels on the same parameters.
 *
 * Nothing the next kn_trainer_step reads is changed: the parameters, the optimizer state
 * and its step count stay as they were (only the trainer's scratch batch and gradient
 * buffers are overwritten, and every step rewrites those anyway). */
#include <string.h>

#include "kiln/device.h"
#include "kiln/nn.h"

/* Copy one output of a run (on any device, any strides) into the host tensor dst. */
static kn_status output_to_host(const kn_tensor *o, kn_tensor *dst, int i) {
    if (!o) return kn_error(KN_ERR_ARG, "kn_trainer_probe: the step graph has no output %d", i);
    kn_tensor *h = NULL;
    KN_TRY(kn_tensor_to(&h, o, KN_CPU));
    kn_status st = kn_tensor_copy_into(dst, h);
    kn_tensor_free(h);
    return st;
}

/* Put the batch where the trainer's interpreters read it. */
static kn_status load_batch(kn_trainer *t, const int32_t *x, const int32_t *y) {
    size_t bytes = (size_t)t->B * (size_t)t->T * sizeof(int32_t);
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->x), KN_CPU, x, bytes));
    return kn_device_memcpy(t->dev, kn_tensor_data(t->y), KN_CPU, y, bytes);
}

/* Loss and gradients from the joint graph; grad (host, slab order) may be NULL. */
static kn_status probe_grads(kn_trainer *t, double *loss, float *grad) {
    const kn_params *p = &t->model->p;
    if (t->scale_in && grad)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_trainer_probe: the step's gradients are loss-scaled; probe a trainer "
                        "without loss scaling (kn_trainer_set_loss_scale with mode none)");
    KN_TRY(kn_trainer_low_refresh(t));
    KN_TRY(kn_program_run(t->prog));
    int64_t one[1] = {1};
    kn_tensor *l = NULL;
    KN_TRY(kn_tensor_empty(&l, KN_DT_F64, 0, one));
    kn_status st = output_to_host(kn_program_output(t->prog, 0), l, 0);
    if (st == KN_OK && loss) *loss = *(const double *)kn_tensor_data(l);
    kn_tensor_free(l);
    if (st != KN_OK || !grad) return st;
    /* a host slab shaped like the parameters (the trainer's gradient slab may be on a GPU) */
    int64_t n[1] = {p->n};
    kn_tensor *slab = NULL, **views = NULL;
    st = kn_tensor_zeros(&slab, KN_DT_F32, 1, n);
    if (st == KN_OK) st = kn_params_views(p, slab, &views);
    for (int i = 0; st == KN_OK && i < p->count; i++)
        st = output_to_host(kn_program_output(t->prog, 1 + i), views[i], 1 + i);
    if (st == KN_OK) memcpy(grad, kn_tensor_data(slab), (size_t)p->n * sizeof(float));
    kn_params_views_free(p, views);
    kn_tensor_free(slab);
    return st;
}

/* The logits [B*T, vocab] of the batch already loaded, from a forward-only graph. */
static kn_status probe_logits(kn_trainer *t, float *logits) {
    const kn_gpt *g = t->model;
    kn_builder *b = NULL;
    kn_graph *fwd = NULL;
    kn_interp *it = NULL;
    kn_tensor *out = NULL;
    kn_val *pvals = kn_calloc((size_t)g->p.count, sizeof *pvals);
    if (!pvals) return kn_error(KN_ERR_OOM, "kn_trainer_probe: out of memory");
    kn_status st = kn_builder_new(&b, KN_MODE_GRAPH);
    if (st == KN_OK) {
        kn_val lv, idx = kn_input(b, "idx", t->x);
        st = kn_gpt_build(b, g, idx, KN_VAL_NONE, pvals, &lv, NULL);
        if (st == KN_OK) {
            kn_builder_output(b, lv);
            st = kn_builder_finish(b, &fwd);
        } else {
            kn_error(st, "%s", kn_builder_error(b));
        }
    }
    if (st == KN_OK) st = kn_interp_new(&it, fwd);
    for (int i = 0; st == KN_OK && i < g->p.count; i++)
        st = kn_interp_bind(it, g->p.info[i].name, t->views[i]);
    if (st == KN_OK) st = kn_interp_bind(it, "idx", t->x);
    if (st == KN_OK) st = kn_interp_run(it);
    int64_t shape[2] = {(int64_t)t->B * t->T, g->cfg.vocab};
    if (st == KN_OK) st = kn_tensor_empty(&out, KN_DT_F32, 2, shape);
    if (st == KN_OK) st = output_to_host(kn_interp_output(it, 0), out, 0);
    if (st == KN_OK) memcpy(logits, kn_tensor_data(out), (size_t)shape[0] * (size_t)shape[1] * sizeof(float));
    kn_tensor_free(out);
    kn_interp_free(it);
    kn_graph_free(fwd);
    kn_builder_free(b);
    kn_free(pvals);
    return st;
}

kn_status kn_trainer_probe(kn_trainer *t, const int32_t *x, const int32_t *y, double *loss, float *grad,
                           float *logits) {
    if (!t || !t->prog || !t->model || !x || !y) return kn_error(KN_ERR_ARG, "kn_trainer_probe: NULL argument");
    const int V = t->model->cfg.vocab;
    for (int64_t i = 0; i < (int64_t)t->B * t->T; i++)
        if (x[i] < 0 || x[i] >= V || y[i] < 0 || y[i] >= V)
            return kn_error(KN_ERR_ARG, "kn_trainer_probe: token %d / target %d at %lld is outside [0, %d)", x[i], y[i],
                            (long long)i, V);
    KN_TRY(load_batch(t, x, y));
    KN_TRY(probe_grads(t, loss, grad));
    return logits ? probe_logits(t, logits) : KN_OK;
}
