/* trainer.c — a training step compiled once and replayed, evaluation, and sampling.
 *
 * The trainer records the GPT's forward pass for a fixed batch shape into a graph (graph
 * mode of the builder), differentiates it into the joint forward+backward graph
 * (kn_autograd), and binds an interpreter to it. Binding is by alias: the interpreter
 * reads the parameter slab and the batch buffers in place, so a step is
 *     copy the batch in -> run the joint graph -> copy gradients into the gradient slab
 *     -> clip -> optimizer update of the parameter slab,
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
#include "nn/nn_impl.h"

static kn_status bind_params(kn_interp *it, const kn_gpt *g) {
    for (int i = 0; i < g->p.count; i++) KN_TRY(kn_interp_bind(it, g->p.info[i].name, g->p.views[i]));
    return KN_OK;
}

static void low_free(kn_trainer *t) {
    kn_params_views_free(t->model ? &t->model->p : NULL, t->low_views);
    kn_tensor_free(t->low);
    t->low = NULL;
    t->low_views = NULL;
    t->low_dt = KN_DT_F32;
    t->low_fresh = false;
}

/* The dtype of the weights' low copies the programs read (params NAME@bf16 / NAME@f16 of
 * the pass lowparams), KN_DT_F32 for none. */
static kn_dtype low_copies_read(const kn_trainer *t) {
    const kn_params *p = &t->model->p;
    const kn_program *ps[2] = {t->prog, t->eval};
    const kn_dtype dts[2] = {KN_DT_BF16, KN_DT_F16};
    char name[KN_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < p->count; i++)
                if (kn_lowparam_name(p->info[i].name, dts[d], name) == KN_OK &&
                    kn_graph_find(kn_program_graph(ps[k]), name) >= 0)
                    return dts[d];
    return KN_DT_F32;
}

/* When the programs read the weights' low copies: a slab of them on dev, its views bound
 * by name in both programs, rounded from the f32 slab before the next run. */
static kn_status bind_low_copies(kn_trainer *t, kn_device dev) {
    low_free(t);
    kn_dtype dt = low_copies_read(t);
    if (dt == KN_DT_F32) return KN_OK;
    const kn_params *p = &t->model->p;
    int64_t n = p->n;
    KN_TRY(kn_tensor_empty_on(&t->low, dev, dt, 1, &n));
    t->low_dt = dt;
    KN_TRY(kn_params_views(p, t->low, &t->low_views));
    kn_program *ps[2] = {t->prog, t->eval};
    char name[KN_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < p->count; i++) {
            KN_TRY(kn_lowparam_name(p->info[i].name, dt, name));
            if (kn_graph_find(kn_program_graph(ps[k]), name) >= 0) KN_TRY(kn_program_bind(ps[k], name, t->low_views[i]));
        }
    return KN_OK;
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

/* Compile the step (joint graph) and eval (forward graph) programs for dev and bind them
 * to the trainer's state (t->views, t->x, t->y, which live on dev). */
static kn_status compile_on(kn_trainer *t, kn_device dev) {
    kn_program_free(t->prog);
    kn_program_free(t->eval);
    t->prog = t->eval = NULL;
    kn_tensor *const *views = t->views;
    kn_program_opts o = {.device = dev, .passes = t->passes, .mode = t->compiled ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES,
                         .cuda_emu = t->cuda_emu};
    KN_TRY(kn_program_compile(&t->prog, t->joint, &o));
    KN_TRY(kn_program_compile(&t->eval, t->fwd, &o));
    kn_program *ps[2] = {t->prog, t->eval};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < t->model->p.count; i++) KN_TRY(kn_program_bind(ps[k], t->model->p.info[i].name, views[i]));
        KN_TRY(kn_program_bind(ps[k], "idx", t->x));
        KN_TRY(kn_program_bind(ps[k], "targets", t->y));
    }
    if (t->scale_in) KN_TRY(kn_program_bind(t->prog, "loss_scale", t->scale_in));
    /* the gradients are written straight into the slab (no copy, no memory of their own) */
    for (int i = 0; i < t->model->p.count; i++) KN_TRY(kn_program_bind_output(t->prog, 1 + i, t->grad_views[i]));
    KN_TRY(bind_low_copies(t, dev));
    if (t->cuda_graph) KN_TRY(kn_program_set_cuda_graph(t->prog, true)); /* the step; eval runs too rarely */
    KN_TRY(kn_program_share_arena(t->eval, t->prog)); /* the graph's arena is idle while eval runs */
    return KN_OK;
}

/* ZeRO-2 frees the gradient slab and ZeRO-3 the parameter slab (kiln/dist.h): a step of the
 * trainer alone has nothing to read or write then. */
static kn_status check_slabs(const kn_trainer *t, const char *fn) {
    if (t->params && t->views && t->grad) return KN_OK;
    return kn_error(KN_ERR_ARG, "%s: the trainer's %s slab is sharded over the ranks by data parallelism (ZeRO, "
                    "kiln/dist.h): step with kn_dp_step; kn_dp_gather_state brings the parameters back for evaluation",
                    fn, t->params ? "gradient" : "parameter");
}

kn_status kn_trainer_set_compiled(kn_trainer *t, bool on) {
    if (!t || !t->joint) return kn_error(KN_ERR_ARG, "kn_trainer_set_compiled: no trainer");
    if (!t->views) return check_slabs(t, "kn_trainer_set_compiled");
    t->compiled = on;
    return compile_on(t, t->dev);
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
        KN_TRY(check_slabs(t, "kn_trainer_set_loss_scale"));
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
        KN_TRY(compile_on(t, t->dev));
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
    if (st == KN_OK) st = compile_on(t, KN_CPU); /* binds the gradient outputs to the views */
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
    low_free(t);
    kn_optim_free(&t->opt);
    memset(t, 0, sizeof *t);
}

/* The batch (host tokens) into t->x, t->y on the trainer's device. */
static kn_status load_batch(kn_trainer *t, const int32_t *x, const int32_t *y) {
    size_t bytes = (size_t)t->B * (size_t)t->T * sizeof(int32_t);
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->x), KN_CPU, x, bytes));
    return kn_device_memcpy(t->dev, kn_tensor_data(t->y), KN_CPU, y, bytes);
}

/* The eager step: build the model op by op on the current batch, differentiate on the
 * tape (kn_backward), copy loss and gradients out. */
static kn_status eager_grads(kn_trainer *t, double *loss) {
    const kn_params *p = &t->model->p;
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val *v = kn_calloc(2 * (size_t)p->count, sizeof *v);
    kn_status st = v ? KN_OK : kn_error(KN_ERR_OOM, "kn_trainer_step: out of memory");
    kn_val logits, l = KN_VAL_NONE;
    if (st == KN_OK)
        st = kn_gpt_build(b, t->model, kn_input(b, "idx", t->x), kn_input(b, "targets", t->y), v, &logits, &l);
    kn_val ls = t->scale_in && st == KN_OK ? kn_mul(b, l, kn_input(b, "loss_scale", t->scale_in)) : l;
    if (st == KN_OK) st = kn_backward(b, ls, p->count, v, v + p->count);
    if (st != KN_OK && kn_builder_status(b) != KN_OK) kn_error(st, "%s", kn_builder_error(b));
    if (st == KN_OK) st = kn_tensor_item(kn_val_tensor(b, l), loss);
    for (int i = 0; st == KN_OK && i < p->count; i++)
        st = kn_tensor_copy_into(t->grad_views[i], kn_val_tensor(b, v[p->count + i]));
    kn_free(v);
    kn_builder_free(b);
    return st;
}


/* The parameter, gradient and optimizer-state slabs of the step, on the trainer's device
 * (the optimizer state is the optimizer's own on the CPU). */
static void slabs(kn_trainer *t, float **param, float **grad, float **state) {
    *param = kn_tensor_data(t->params);
    *grad = t->grad ? kn_tensor_data(t->grad) : NULL;
    *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
}

/* The optimizer, writing the weights' low copies in the same pass when there are any. */
static kn_status optim_step(kn_trainer *t, float *param, float *grad, float *state, double lr) {
    if (!t->low) return kn_device_optim_step(t->dev, &t->opt, param, grad, state, lr);
    KN_TRY(kn_device_optim_step_low(t->dev, &t->opt, param, grad, state, lr, t->low_dt, kn_tensor_data(t->low)));
    t->low_fresh = true;
    return KN_OK;
}

/* The update, one path for every device, by its backend: the gradient-sync hook (where
 * distributed training plugs in: an all-reduce over the gradient slab, or the
 * reduce-scatter of a sharded optimizer), the unscaling, the clip, the loss scaler's
 * overflow check (a skipped step ends there), the divergence check, the optimizer. */
static kn_status update(kn_trainer *t, double l, double lr, double *loss, double *gnorm) {
    float *param, *grad, *state;
    slabs(t, &param, &grad, &state);
    int64_t n = t->model->p.n;
    double norm;
    bool skip;
    if (t->grad_hook) KN_TRY(t->grad_hook(t, grad, n, t->grad_hook_ctx));
    KN_TRY(kn_trainer_unscale(t, grad, n)); /* loss scaling (loss_scale.c) */
    KN_TRY(kn_device_clip_grad_norm(t->dev, grad, n, t->clip, &norm));
    KN_TRY(kn_trainer_scaler_after(t, l, norm, &skip));
    t->skipped = skip;
    if (skip) { /* inf/NaN: the parameters and the optimizer state stay as they were */
        if (loss) *loss = l;
        if (gnorm) *gnorm = norm;
        return KN_OK;
    }
    if (!isfinite(l) || !isfinite(norm))
        return kn_error(KN_ERR_ARG, "kn_trainer_step: loss %g, gradient norm %g at optimizer step %lld (diverged: "
                        "lower the learning rate)", l, norm, (long long)t->opt.step);
    KN_TRY(optim_step(t, param, grad, state, lr));
    if (loss) *loss = l;
    if (gnorm) *gnorm = norm;
    return KN_OK;
}
static kn_status output_item(const kn_tensor *o, double *out);

/* One path for every device: batch in, the joint graph (or the eager tape on the CPU),
 * the gradients into the slab, the loss out, the update. */
kn_status kn_trainer_step(kn_trainer *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm) {
    if (!t || !t->prog || !x || !y) return kn_error(KN_ERR_ARG, "kn_trainer_step: NULL argument");
    if (t->eager && t->dev.type != KN_DEVICE_CPU)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_trainer_step: eager mode runs on the CPU only (use graph mode on a GPU)");
    KN_TRY(check_slabs(t, "kn_trainer_step"));
    double l;
    KN_TRY(load_batch(t, x, y));
    if (t->eager) {
        KN_TRY(eager_grads(t, &l));
    } else {
        KN_TRY(kn_trainer_low_refresh(t));
        KN_TRY(kn_program_run(t->prog)); /* the gradients are in the slab: bound in compile_on */
        KN_TRY(output_item(kn_program_output(t->prog, 0), &l));
    }
    return update(t, l, lr, loss, gnorm);
}

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
    KN_TRY(check_slabs(t, "kn_trainer_optimize"));
    float *param, *grad, *state;
    slabs(t, &param, &grad, &state);
    double norm;
    KN_TRY(kn_device_clip_grad_norm(t->dev, grad, t->model->p.n, t->clip, &norm));
    KN_TRY(optim_step(t, param, grad, state, lr));
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
    st = compile_on(t, dev);
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
    (void)compile_on(t, KN_CPU);
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
