/* trainer.c — the trainer's state (a training step's graphs, slabs and optimizer), its
 * moves (loss scaling on, compiled mode, a device), evaluation, and sampling.
 *
 * The trainer records the GPT's forward pass for a fixed batch shape into a graph (graph
 * mode of the builder) and differentiates it into the joint forward+backward graph
 * (kn_autograd). The step runner (kiln/step.h, core/nn/step.c) compiles the joint graph
 * into the step program and the forward into the evaluation program, both bound by alias
 * to the trainer's state, and takes each step:
 *     copy the batch in -> run the step program (gradients written into the slab; with K
 *     micro-batches, summed) -> unscale -> clip -> the loss scaler's overflow check (a
 *     skipped step ends there) -> optimizer update of the parameter slab,
 * with no graph rebuilt and no parameter copied. Everything is sequential and in a fixed
 * order, so the same (parameters, optimizer state, step, batch) always gives the same
 * bits: the basis of exact resume. The eager mode (t->eager) rebuilds the model op by op
 * every step and differentiates on the tape instead: slower, the same bits.
 *
 * The trainer keeps one set of state (batch, parameter, gradient and optimizer-state
 * slabs) on its device, and one step path for every device: each part asks the device
 * table (copies, clip, optimizer). On a GPU (kn_trainer_to_device) the slabs are device
 * copies and the programs are recompiled for it; per step only the batch goes up and the
 * loss and gradient norm come down; kn_trainer_sync_host brings parameters and optimizer
 * state back to the host for a checkpoint. */
#include <math.h>
#include <string.h>

#include "kiln/autograd.h"
#include "kiln/device.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/step.h"
#include "nn/nn_impl.h"

static kn_status bind_params(kn_interp *it, const kn_gpt *g) {
    for (int i = 0; i < g->p.count; i++) KN_TRY(kn_interp_bind(it, g->p.info[i].name, g->p.views[i]));
    return KN_OK;
}

void kn_trainer_low_free(kn_trainer *t) {
    kn_params_views_free(t->model ? &t->model->p : NULL, t->low_views);
    kn_tensor_free(t->low);
    t->low = NULL;
    t->low_views = NULL;
    t->low_dt = KN_DT_F32;
    t->low_fresh = false;
}

kn_status kn_trainer_low_refresh(kn_trainer *t) {
    if (!t) return kn_error(KN_ERR_ARG, "kn_trainer_low_refresh: NULL trainer");
    if (!t->low || t->low_fresh) return KN_OK;
    if (!t->params)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_trainer: the weights' low copies (the pass lowparams) are rounded "
                        "from the parameter slab, which ZeRO-3 shards: drop lowparams from the pass list");
    kn_node n = {.op = KN_OP_CAST, .nin = 1, .attrs = kn_attrs_default()};
    n.attrs.dtype = n.type.dtype = t->low_dt;
    n.type.ndim = 1;
    n.type.shape[0] = t->model->p.n;
    const kn_tensor *in[1] = {t->params};
    kn_tensor *c = NULL;
    kn_status st = kn_node_eval(&n, in, &c);
    if (st == KN_OK)
        st = kn_device_memcpy(t->dev, kn_tensor_data(t->low), c->storage->device, kn_tensor_data(c),
                              (size_t)n.type.shape[0] * kn_dtype_size(t->low_dt));
    kn_tensor_free(c);
    if (st == KN_OK) t->low_fresh = true;
    return st;
}

/* ZeRO-2 frees the gradient slab and ZeRO-3 the parameter slab (kiln/dist.h): a step of the
 * trainer alone has nothing to read or write then. */
kn_status kn_trainer_check_slabs(const kn_trainer *t, const char *fn) {
    if (t->params && t->views && t->grad) return KN_OK;
    return kn_error(KN_ERR_ARG, "%s: the trainer's %s slab is sharded over the ranks by data parallelism (ZeRO, "
                    "kiln/dist.h): step with kn_dp_step; kn_dp_gather_state brings the parameters back for evaluation",
                    fn, t->params ? "gradient" : "parameter");
}

kn_status kn_trainer_set_compiled(kn_trainer *t, bool on) {
    if (!t || !t->joint) return kn_error(KN_ERR_ARG, "kn_trainer_set_compiled: no trainer");
    if (!t->views && !t->step.has_comm) return kn_trainer_check_slabs(t, "kn_trainer_set_compiled");
    t->compiled = on;
    return kn_step_compile(t, t->dev);
}

/* Record the forward graph of model on inputs "idx" (and "targets" when with_loss). With
 * `scaled`, *loss is loss * the 0-d input "loss_scale" (what the backward differentiates),
 * while the graph's output stays the loss itself. */
static kn_status record_forward(const kn_gpt *model, const kn_tensor *x, const kn_tensor *y, bool scaled,
                                kn_graph **fwd, kn_val *pvals, kn_val *loss) {
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val idx = kn_input(b, "idx", x);
    kn_val tgt = y ? kn_input(b, "targets", y) : KN_VAL_NONE;
    kn_val logits, l = KN_VAL_NONE;
    kn_status st = kn_gpt_build(b, model, idx, tgt, pvals, &logits, &l);
    if (st == KN_OK) {
        kn_builder_output(b, y ? l : logits);
        if (scaled) l = kn_mul(b, l, kn_input_typed(b, "loss_scale", KN_DT_F32, 0, NULL));
        st = kn_builder_finish(b, fwd);
    } else {
        kn_error(st, "%s", kn_builder_error(b));
    }
    if (loss) *loss = l;
    kn_builder_free(b);
    return st;
}

/* The joint graph differentiating loss * "loss_scale" (scaled) or the loss, into *joint. */
static kn_status record_joint(const kn_trainer *t, bool scaled, kn_graph **joint) {
    const kn_params *p = &t->model->p;
    kn_val *pvals = kn_calloc((size_t)p->count, sizeof *pvals), loss;
    kn_graph *fwd = NULL;
    kn_status st = pvals ? KN_OK : kn_error(KN_ERR_OOM, "kn_trainer_set_loss_scale: out of memory");
    if (st == KN_OK) st = record_forward(t->model, t->x, t->y, scaled, &fwd, pvals, &loss);
    if (st == KN_OK) st = kn_autograd(fwd, loss, p->count, pvals, joint, NULL);
    kn_graph_free(fwd);
    kn_free(pvals);
    return st;
}

kn_status kn_trainer_set_loss_scale(kn_trainer *t, const kn_loss_scaler *s) {
    if (!t || !t->joint || !s) return kn_error(KN_ERR_ARG, "kn_trainer_set_loss_scale: NULL argument");
    KN_TRY(kn_loss_scaler_check(s));
    bool on = s->mode != KN_LOSS_SCALE_NONE;
    if (on != (t->scale_in != NULL)) { /* the step's graph gains or loses its "loss_scale" input */
        if (!t->step.has_comm) KN_TRY(kn_trainer_check_slabs(t, "kn_trainer_set_loss_scale"));
        kn_graph *joint = NULL;
        kn_tensor *in = NULL;
        kn_status st = on ? kn_tensor_empty_on(&in, t->dev, KN_DT_F32, 0, NULL) : KN_OK;
        if (st == KN_OK) st = record_joint(t, on, &joint);
        if (st != KN_OK) {
            kn_tensor_free(in);
            return st;
        }
        kn_graph_free(t->joint);
        kn_tensor_free(t->scale_in);
        t->joint = joint;
        t->scale_in = in;
        t->scaler = *s;
        KN_TRY(kn_step_compile(t, t->dev));
    }
    t->scaler = *s;
    return kn_trainer_upload_scale(t);
}

kn_status kn_trainer_new(kn_trainer *t, kn_gpt *model, int B, int T, const kn_optim_config *ocfg, double clip) {
    if (!t || !model || !ocfg) return kn_error(KN_ERR_ARG, "kn_trainer_new: NULL argument");
    if (B < 1 || T < 1 || T > model->cfg.context)
        return kn_error(KN_ERR_ARG, "kn_trainer_new: batch %d x %d: need B >= 1 and 1 <= T <= context %d", B, T,
                        model->cfg.context);
    memset(t, 0, sizeof *t);
    t->scaler = kn_loss_scaler_none();
    t->step.micro = 1; /* one process, one micro-batch: kn_step_set_comm changes it */
    t->model = model;
    t->B = B;
    t->T = T;
    t->clip = clip;
    const kn_params *p = &model->p;
    int64_t bt[2] = {B, T}, n[1] = {p->n};
    kn_val *pvals = kn_calloc((size_t)p->count, sizeof *pvals);
    kn_status st = pvals ? KN_OK : kn_error(KN_ERR_OOM, "kn_trainer_new: out of memory");
    kn_val loss;
    t->params = p->slab; /* borrowed on the CPU */
    t->views = p->views;
    if (st == KN_OK) st = kn_tensor_zeros(&t->x, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = kn_tensor_zeros(&t->y, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = record_forward(model, t->x, t->y, false, &t->fwd, pvals, &loss);
    if (st == KN_OK) st = kn_autograd(t->fwd, loss, p->count, pvals, &t->joint, NULL);
    if (st == KN_OK) st = kn_tensor_zeros(&t->grad, KN_DT_F32, 1, n);
    if (st == KN_OK) st = kn_params_views(p, t->grad, &t->grad_views);
    if (st == KN_OK) st = kn_step_compile(t, KN_CPU); /* binds the gradient outputs to the views */
    if (st == KN_OK) st = kn_optim_init(&t->opt, ocfg, p->n, p->n_decay);
    kn_free(pvals);
    if (st != KN_OK) kn_trainer_free(t);
    return st;
}

void kn_trainer_free(kn_trainer *t) {
    if (!t) return;
    kn_program_free(t->prog);
    kn_program_free(t->eval);
    kn_graph_free(t->joint);
    kn_graph_free(t->fwd);
    kn_tensor_free(t->x);
    kn_tensor_free(t->y);
    kn_params_views_free(t->model ? &t->model->p : NULL, t->grad_views);
    kn_tensor_free(t->grad);
    if (t->dev.type != KN_DEVICE_CPU) { /* the device copies; on the CPU they are borrowed */
        kn_params_views_free(t->model ? &t->model->p : NULL, t->views);
        kn_tensor_free(t->params);
    }
    kn_tensor_free(t->state);
    kn_tensor_free(t->scale_in);
    kn_tensor_free(t->step.acc);
    kn_trainer_low_free(t);
    kn_optim_free(&t->opt);
    memset(t, 0, sizeof *t);
}

/* One path for every device and for data parallelism: the step runner (core/nn/step.c). */
kn_status kn_trainer_step(kn_trainer *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm) {
    if (!t || !t->prog || !x || !y) return kn_error(KN_ERR_ARG, "kn_trainer_step: NULL argument");
    if (t->step.has_comm) /* the batch is the global one there, and the update the strategy's */
        return kn_error(KN_ERR_ARG, "kn_trainer_step: this trainer steps through data parallelism's hooks (kiln/dist.h): "
                        "step with kn_dp_step on the global batch");
    return kn_step_run(t, x, y, t->B * t->step.micro, lr, loss, gnorm);
}

/* The batch (host tokens) into t->x, t->y on the trainer's device. */
static kn_status load_batch(kn_trainer *t, const int32_t *x, const int32_t *y) {
    size_t bytes = (size_t)t->B * (size_t)t->T * sizeof(int32_t);
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->x), KN_CPU, x, bytes));
    return kn_device_memcpy(t->dev, kn_tensor_data(t->y), KN_CPU, y, bytes);
}

static kn_status output_item(const kn_tensor *o, double *out);

kn_status kn_trainer_eval(kn_trainer *t, const int32_t *x, const int32_t *y, double *loss) {
    if (!t || !t->eval || !x || !y || !loss) return kn_error(KN_ERR_ARG, "kn_trainer_eval: NULL argument");
    KN_TRY(load_batch(t, x, y));
    KN_TRY(kn_trainer_low_refresh(t));
    KN_TRY(kn_program_run(t->eval));
    return output_item(kn_program_output(t->eval, 0), loss);
}

/* The value of a 0-d output wherever it lives. */
static kn_status output_item(const kn_tensor *o, double *out) {
    if (!o) return kn_error(KN_ERR_ARG, "kn_trainer: the graph has no loss output");
    return kn_tensor_item_any(o, out);
}

kn_status kn_trainer_optimize(kn_trainer *t, double lr, double *gnorm) {
    if (!t || !t->model) return kn_error(KN_ERR_ARG, "kn_trainer_optimize: trainer not initialized");
    KN_TRY(kn_trainer_check_slabs(t, "kn_trainer_optimize"));
    float *param = kn_tensor_data(t->params), *grad = kn_tensor_data(t->grad);
    float *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
    double norm;
    KN_TRY(kn_device_clip_grad_norm(t->dev, grad, t->model->p.n, t->clip, &norm));
    KN_TRY(kn_trainer_optim_step(t, param, grad, state, lr));
    if (gnorm) *gnorm = norm;
    return KN_OK;
}

/* The state a trainer moves: what to_device allocates on the new device, and frees when
 * it fails or replaces. */
typedef struct trainer_state {
    kn_tensor *x, *y, *grad, **grad_views, *params, **views, *state;
} trainer_state;

static void state_free(const kn_params *p, trainer_state *s) {
    kn_params_views_free(p, s->grad_views);
    kn_params_views_free(p, s->views);
    kn_tensor_free(s->x);
    kn_tensor_free(s->y);
    kn_tensor_free(s->grad);
    kn_tensor_free(s->params);
    kn_tensor_free(s->state);
    memset(s, 0, sizeof *s);
}

kn_status kn_trainer_to_device(kn_trainer *t, kn_device dev) {
    if (!t || !t->model || !t->prog) return kn_error(KN_ERR_ARG, "kn_trainer_to_device: trainer not initialized");
    if (kn_device_equal(dev, t->dev)) return KN_OK;
    if (dev.type == KN_DEVICE_CPU || t->dev.type != KN_DEVICE_CPU)
        return kn_error(KN_ERR_ARG, "kn_trainer_to_device: can move a CPU trainer to a device only (asked for "
                        "type %d index %d)", (int)dev.type, dev.index);
    KN_TRY(kn_device_check("kn_trainer_to_device", dev));
    if (t->scale_in)
        return kn_error(KN_ERR_ARG, "kn_trainer_to_device: move the trainer before kn_trainer_set_loss_scale (its "
                        "scale input lives on the CPU)");
    const kn_params *p = &t->model->p;
    int64_t n[1] = {p->n}, sn[1] = {t->opt.state_len}, bt[2] = {t->B, t->T};
    trainer_state s = {0};
    kn_status st = kn_tensor_to(&s.params, p->slab, dev);
    if (st == KN_OK) st = kn_tensor_empty_on(&s.grad, dev, KN_DT_F32, 1, n);
    if (st == KN_OK) st = kn_tensor_empty_on(&s.state, dev, KN_DT_F32, 1, sn);
    if (st == KN_OK && sn[0] > 0)
        st = kn_device_memcpy(dev, kn_tensor_data(s.state), KN_CPU, t->opt.state, (size_t)sn[0] * sizeof(float));
    if (st == KN_OK) st = kn_tensor_empty_on(&s.x, dev, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = kn_tensor_empty_on(&s.y, dev, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = kn_params_views(p, s.params, &s.views);
    if (st == KN_OK) st = kn_params_views(p, s.grad, &s.grad_views);
    if (st != KN_OK) {
        state_free(p, &s);
        return st;
    }
    /* swap the new state in; the CPU's own (batch and gradient; the slab and the optimizer
     * state stay the model's and the optimizer's: the host copies) goes */
    trainer_state old = {t->x, t->y, t->grad, t->grad_views, NULL, NULL, NULL};
    kn_tensor **borrowed_views = t->views, *borrowed_params = t->params;
    t->x = s.x, t->y = s.y, t->grad = s.grad, t->grad_views = s.grad_views;
    t->params = s.params, t->views = s.views, t->state = s.state;
    st = kn_step_compile(t, dev);
    if (st == KN_OK) {
        t->dev = dev;
        state_free(p, &old);
        return KN_OK;
    }
    /* back to the CPU's state and programs */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kn_last_error());
    t->x = old.x, t->y = old.y, t->grad = old.grad, t->grad_views = old.grad_views;
    t->params = borrowed_params, t->views = borrowed_views, t->state = NULL;
    (void)kn_step_compile(t, KN_CPU);
    state_free(p, &s);
    return kn_error(st, "%s", msg);
}

kn_status kn_trainer_sync_host(kn_trainer *t) {
    if (!t || !t->model) return kn_error(KN_ERR_ARG, "kn_trainer_sync_host: trainer not initialized");
    if (t->dev.type == KN_DEVICE_CPU) return KN_OK;
    const kn_params *p = &t->model->p;
    KN_TRY(kn_device_memcpy(KN_CPU, p->data, t->dev, kn_tensor_data(t->params), (size_t)p->n * sizeof(float)));
    if (t->opt.state_len > 0 && t->state)
        KN_TRY(kn_device_memcpy(KN_CPU, t->opt.state, t->dev, kn_tensor_data(t->state),
                                (size_t)t->opt.state_len * sizeof(float)));
    return KN_OK;
}

/* ---------------------------------------------------------------- sampling */

/* Draw from softmax(row / temperature) with one uniform from rng (argmax at temperature 0). */
static int32_t draw(const float *row, int V, double temperature, kn_rng *rng) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    if (temperature <= 0) return best;
    double z = 0, u;
    for (int v = 0; v < V; v++) z += exp(((double)row[v] - row[best]) / temperature);
    kn_rng_uniform_f64(rng, &u, 1);
    double acc = 0, target = u * z;
    for (int v = 0; v < V; v++) {
        acc += exp(((double)row[v] - row[best]) / temperature);
        if (acc > target) return v;
    }
    return best;
}

kn_status kn_gpt_sample(const kn_gpt *g, int32_t *ids, int n0, int n, double temperature, kn_rng *rng) {
    if (!g || !ids || !rng || n0 < 1 || n < n0)
        return kn_error(KN_ERR_ARG, "kn_gpt_sample: need a prompt of >= 1 token (got %d) and n >= n0 (got %d)", n0, n);
    for (int i = 0; i < n0; i++)
        if (ids[i] < 0 || ids[i] >= g->cfg.vocab)
            return kn_error(KN_ERR_ARG, "kn_gpt_sample: prompt token %d at %d is outside [0, %d)", ids[i], i,
                            g->cfg.vocab);
    if (n == n0) return KN_OK;
    const int T = g->cfg.context < n ? g->cfg.context : n, V = g->cfg.vocab;
    int64_t shape[2] = {1, T};
    kn_tensor *x = NULL;
    kn_graph *fwd = NULL;
    kn_interp *it = NULL;
    kn_val *pvals = kn_calloc((size_t)g->p.count, sizeof *pvals);
    kn_status st = pvals ? KN_OK : kn_error(KN_ERR_OOM, "kn_gpt_sample: out of memory");
    if (st == KN_OK) st = kn_tensor_zeros(&x, KN_DT_I32, 2, shape);
    if (st == KN_OK) st = record_forward(g, x, NULL, false, &fwd, pvals, NULL);
    if (st == KN_OK) st = kn_interp_new(&it, fwd);
    if (st == KN_OK) st = bind_params(it, g);
    if (st == KN_OK) st = kn_interp_bind(it, "idx", x);
    int32_t *xd = st == KN_OK ? kn_tensor_data(x) : NULL;
    for (int len = n0; st == KN_OK && len < n; len++) {
        /* causal attention: positions past L cannot influence position L-1, so the window is
         * left-aligned and the tail is padding */
        int L = len < T ? len : T;
        memset(xd, 0, (size_t)T * sizeof *xd);
        memcpy(xd, ids + len - L, (size_t)L * sizeof *xd);
        st = kn_interp_run(it);
        if (st != KN_OK) break;
        const float *logits = kn_tensor_data(kn_interp_output(it, 0));
        ids[len] = draw(logits + (size_t)(L - 1) * (size_t)V, V, temperature, rng);
    }
    kn_interp_free(it);
    kn_graph_free(fwd);
    kn_tensor_free(x);
    kn_free(pvals);
    return st;
}
