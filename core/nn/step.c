/* step.c — the step runner (kiln/step.h): the one place a training step is compiled and
 * taken, for one process and for data parallelism alike.
 *
 * kn_step_compile makes the trainer's two programs (the step: the joint forward+backward
 * graph; evaluation: the forward graph) for a device and binds them to the trainer's
 * state. The step program is compiled with the trainer's passes and then the
 * communication's pass (ddp, zero, zero3: core/passes/ddp.c), so a recompile for any
 * reason (compiled or node-by-node mode, a loss scale turned on, a device) keeps the
 * collective ops and the parameters' low copies (bf16/fp16's lowparams) bound: before the
 * runner, data parallelism swapped in a program of its own that bound neither.
 *
 * kn_step_run takes one optimizer step:
 *   one process   batch in -> the joint program (or the eager tape) -> the gradients
 *                 straight into the slab -> the gradient hook -> unscale -> clip -> the
 *                 loss scaler's overflow check (a skip ends there) -> the optimizer;
 *                 exactly the trainer's step before the runner, bit for bit. With K
 *                 micro-batches the runs' gradients are summed on the device and divided
 *                 by K before the hook, and the loss is the runs' mean.
 *   with comm     (a pipeline: its `grads` hook takes the micro-batches, the rest as here)
 *                 for each micro-batch: its rows in, micro_begin, the step program (its
 *                 collectives run through the hooks: gradients stored, buckets reduced
 *                 as the backward goes), micro_end; then the loss summed over the ranks,
 *                 the reduced gradients scaled by 1/(ranks x micro x loss scale) and
 *                 clipped by the global norm (the comm's clip), and with a loss scale the
 *                 overflow flag summed over the ranks: ONE decision, so an inf on any rank
 *                 skips the step on every rank and every rank's scaler moves the same way
 *                 (the ranks' scales never drift apart); then the comm's update.
 * The skipped step leaves the parameters, the optimizer state and opt.step as they were
 * (loss_scale.c says why). */
#include <math.h>
#include <string.h>

#include "kiln/autograd.h"
#include "kiln/device.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/step.h"
#include "nn/nn_impl.h"

/* ---------------------------------------------------------------- the programs */

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
    kn_trainer_low_free(t);
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

/* Bind program p's parameters that its graph reads to the trainer's views; with the slab
 * sharded away (ZeRO-3 between gathers: t->views NULL) they are deferred instead. */
static kn_status bind_params(kn_trainer *t, kn_program *p) {
    const kn_params *pr = &t->model->p;
    for (int i = 0; i < pr->count; i++) {
        if (kn_graph_find(kn_program_graph(p), pr->info[i].name) < 0) continue; /* ZeRO-3's step gathers them */
        KN_TRY(t->views ? kn_program_bind(p, pr->info[i].name, t->views[i]) : kn_program_defer(p, pr->info[i].name));
    }
    return KN_OK;
}

kn_status kn_step_compile(kn_trainer *t, kn_device dev) {
    if (!t || !t->joint || !t->fwd) return kn_error(KN_ERR_ARG, "kn_step_compile: no trainer");
    kn_step_runner *r = &t->step;
    kn_program_free(t->prog);
    kn_program_free(t->eval);
    t->prog = t->eval = NULL;
    kn_tensor_free(r->acc); /* on the old device, perhaps: made again at the next step */
    r->acc = NULL;
    /* the step: the trainer's passes, then the communication's (collectives placed last) */
    char list[256];
    bool own = t->passes && *t->passes && strcmp(t->passes, "none");
    const char *cp = r->has_comm && r->comm.pass && *r->comm.pass ? r->comm.pass : NULL;
    snprintf(list, sizeof list, "%s%s%s", own ? t->passes : "", own && cp ? "," : "", cp ? cp : "");
    kn_program_mode mode = t->compiled ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES;
    kn_program_opts so = {.device = dev, .passes = list[0] ? list : NULL, .mode = mode, .cuda_emu = t->cuda_emu,
                          .no_plan = t->no_plan};
    kn_program_opts eo = {.device = dev, .passes = t->passes, .mode = mode, .cuda_emu = t->cuda_emu};
    KN_TRY(kn_program_compile(&t->prog, t->joint, &so));
    KN_TRY(kn_program_compile(&t->eval, t->fwd, &eo));
    kn_program *ps[2] = {t->prog, t->eval};
    for (int k = 0; k < 2; k++) {
        KN_TRY(bind_params(t, ps[k]));
        KN_TRY(kn_program_bind(ps[k], "idx", t->x));
        KN_TRY(kn_program_bind(ps[k], "targets", t->y));
    }
    if (t->scale_in) KN_TRY(kn_program_bind(t->prog, "loss_scale", t->scale_in));
    /* one process: the gradients are written straight into the slab (no copy, no memory
     * of their own); with communication the pass's grad_store ops put them where the
     * strategy keeps them */
    for (int i = 0; !r->has_comm && i < t->model->p.count; i++)
        KN_TRY(kn_program_bind_output(t->prog, 1 + i, t->grad_views[i]));
    KN_TRY(bind_low_copies(t, dev));
    if (r->has_comm) {
        kn_program_set_collectives(t->prog, &r->comm.coll);
        if (r->comm.compiled) KN_TRY(r->comm.compiled(r->comm.ctx, t->prog));
    }
    if (t->cuda_graph) KN_TRY(kn_program_set_cuda_graph(t->prog, true)); /* the step; eval runs too rarely */
    KN_TRY(kn_program_share_arena(t->eval, t->prog)); /* the graph's arena is idle while eval runs */
    return KN_OK;
}

kn_status kn_step_set_comm(kn_trainer *t, const kn_step_comm *c, int micro) {
    if (!t || !t->joint) return kn_error(KN_ERR_ARG, "kn_step_set_comm: no trainer");
    if (micro < 1) return kn_error(KN_ERR_ARG, "kn_step_set_comm: %d micro-batches: need >= 1", micro);
    if (!c && micro > 1 && t->eager)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_step_set_comm: gradient accumulation runs the step program (graph "
                        "mode), not the eager tape");
    if (c && (!c->micro_begin || !c->micro_end || !c->sum || !c->clip || !c->update || !c->coll.run ||
              c->ranks < 1 || c->rank < 0 || c->rank >= c->ranks))
        return kn_error(KN_ERR_ARG, "kn_step_set_comm: incomplete hooks (rank %d of %d)", c->rank, c->ranks);
    kn_step_runner *r = &t->step;
    r->micro = micro;
    r->has_comm = c != NULL;
    if (c) r->comm = *c;
    else memset(&r->comm, 0, sizeof r->comm);
    return kn_step_compile(t, t->dev);
}

/* ---------------------------------------------------------------- the step */

/* Rows [first, first + B) of x and y into t->x, t->y on the trainer's device. */
static kn_status load_rows(kn_trainer *t, const int32_t *x, const int32_t *y, size_t first) {
    size_t row = (size_t)t->T, bytes = (size_t)t->B * row * sizeof(int32_t);
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->x), KN_CPU, x + first * row, bytes));
    return kn_device_memcpy(t->dev, kn_tensor_data(t->y), KN_CPU, y + first * row, bytes);
}

/* The value of a 0-d output wherever it lives (from a GPU: ordered behind the run). */
static kn_status output_item(const kn_tensor *o, double *out) {
    if (!o) return kn_error(KN_ERR_ARG, "kn_step_run: the graph has no loss output");
    return kn_tensor_item_any(o, out);
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

kn_status kn_trainer_optim_step(kn_trainer *t, float *param, float *grad, float *state, double lr) {
    if (t->optim_hook) { /* ZeRO-Offload (kiln/offload.h): the step on the host */
        t->low_fresh = false;
        return t->optim_hook(t->optim_hook_ctx, param, grad, lr);
    }
    if (!t->low) return kn_device_optim_step(t->dev, &t->opt, param, grad, state, lr);
    KN_TRY(kn_device_optim_step_low(t->dev, &t->opt, param, grad, state, lr, t->low_dt, kn_tensor_data(t->low)));
    t->low_fresh = true;
    return KN_OK;
}

/* The update of one process: the gradient-sync hook, the unscaling, the clip, the loss
 * scaler's overflow check (a skipped step ends there), the divergence check, the
 * optimizer. */
static kn_status update_local(kn_trainer *t, double l, double lr, double *loss, double *gnorm) {
    float *param = kn_tensor_data(t->params), *grad = kn_tensor_data(t->grad);
    float *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
    int64_t n = t->model->p.n;
    double norm;
    bool skip;
    if (t->grad_hook) KN_TRY(t->grad_hook(t, grad, n, t->grad_hook_ctx));
    KN_TRY(kn_trainer_unscale(t, grad, n)); /* loss scaling (loss_scale.c) */
    KN_TRY(kn_device_clip_grad_norm(t->dev, grad, n, t->clip, &norm));
    KN_TRY(kn_trainer_scaler_after(t, l, norm, &skip));
    t->skipped = skip;
    if (loss) *loss = l;
    if (gnorm) *gnorm = norm;
    if (skip) return KN_OK; /* inf/NaN: the parameters and the optimizer state stay as they were */
    if (!isfinite(l) || !isfinite(norm))
        return kn_error(KN_ERR_ARG, "kn_trainer_step: loss %g, gradient norm %g at optimizer step %lld (diverged: "
                        "lower the learning rate)", l, norm, (long long)t->opt.step);
    return kn_trainer_optim_step(t, param, grad, state, lr);
}

/* The step with communication: the micro-batches, the reduced loss, the comm's clip, one
 * overflow decision for all ranks, the comm's update. */
static kn_status run_comm(kn_trainer *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm) {
    const kn_step_comm *c = &t->step.comm;
    int K = t->step.micro, N = c->ranks;
    double lsum = 0;
    if (c->grads) KN_TRY(c->grads(c->ctx, x, y, &lsum)); /* a pipeline's schedule */
    for (int m = 0; !c->grads && m < K; m++) {
        double l = 0;
        KN_TRY(load_rows(t, x, y, ((size_t)c->rank * (size_t)K + (size_t)m) * (size_t)t->B));
        KN_TRY(c->micro_begin(c->ctx, m, m == K - 1));
        kn_status st = kn_trainer_low_refresh(t); /* the low copies, after an update the comm made */
        if (st == KN_OK) st = kn_program_run(t->prog);
        KN_TRY(c->micro_end(c->ctx, m, st));
        KN_TRY(output_item(kn_program_output(t->prog, 0), &l));
        lsum += l;
    }
    /* the global batch's loss: the mean of every rank's micro-batch means */
    double gl = lsum / K;
    KN_TRY(c->sum(c->ctx, &gl, "loss"));
    gl /= N;
    bool scaled = t->scaler.mode != KN_LOSS_SCALE_NONE && t->scaler.scale != 1;
    double scale = scaled ? 1.0 / ((double)N * K * t->scaler.scale) : 1.0 / ((double)N * K), norm;
    KN_TRY(c->clip(c->ctx, scale, t->inject_inf, &norm));
    t->inject_inf = false;
    bool skip = false;
    if (t->scaler.mode != KN_LOSS_SCALE_NONE) {
        /* one decision: an overflow on any rank (a finite loss, a non-finite norm there)
         * counts on every rank, so all skip together and their scalers stay equal */
        double over = isfinite(gl) && !isfinite(norm) ? 1 : 0;
        KN_TRY(c->sum(c->ctx, &over, "loss-scale overflow flag"));
        if (over > 0 && isfinite(norm)) norm = INFINITY; /* another rank's overflow */
        KN_TRY(kn_trainer_scaler_after(t, gl, norm, &skip));
    }
    t->skipped = skip;
    if (loss) *loss = gl;
    if (gnorm) *gnorm = norm;
    if (skip) return KN_OK;
    if (!isfinite(gl) || !isfinite(norm))
        return kn_error(KN_ERR_ARG, "kn_dp_step: loss %g, gradient norm %g at optimizer step %lld (diverged: lower "
                        "the learning rate)", gl, norm, (long long)t->opt.step);
    return c->update(c->ctx, lr);
}

kn_status kn_step_add(kn_device dev, float *dst, const float *a, const float *b, int64_t n) {
    if (!dst || !a || !b || n < 0) return kn_error(KN_ERR_ARG, "kn_step_add: NULL slab or n = %lld", (long long)n);
    if (n == 0) return KN_OK;
    kn_node nd = {.op = KN_OP_ADD, .nin = 2, .attrs = kn_attrs_default()};
    nd.type.dtype = KN_DT_F32;
    nd.type.ndim = 1;
    nd.type.shape[0] = n;
    kn_tensor *ta = NULL, *tb = NULL, *c = NULL;
    kn_status st = kn_tensor_wrap(&ta, dev, (void *)a, KN_DT_F32, 1, &n);
    if (st == KN_OK) st = kn_tensor_wrap(&tb, dev, (void *)b, KN_DT_F32, 1, &n);
    const kn_tensor *in[2] = {ta, tb};
    if (st == KN_OK) st = kn_node_eval(&nd, in, &c);
    if (st == KN_OK) st = kn_device_memcpy(dev, dst, c->storage->device, kn_tensor_data(c), (size_t)n * sizeof(float));
    kn_tensor_free(c);
    kn_tensor_free(tb);
    kn_tensor_free(ta);
    return st;
}

/* dst = a + b over the slab's n floats, on the trainer's device. */
static kn_status add_into(kn_trainer *t, kn_tensor *dst, const kn_tensor *a, const kn_tensor *b) {
    return kn_step_add(t->dev, kn_tensor_data(dst), kn_tensor_data(a), kn_tensor_data(b), t->model->p.n);
}

/* One process, K > 1 micro-batches: each run writes its gradients into the slab; they are
 * summed in r->acc, the last run's added into the slab, which is divided by K. */
static kn_status run_accum(kn_trainer *t, const int32_t *x, const int32_t *y, double *loss) {
    kn_step_runner *r = &t->step;
    int K = r->micro;
    int64_t n = t->model->p.n;
    if (!r->acc) KN_TRY(kn_tensor_empty_on(&r->acc, t->dev, KN_DT_F32, 1, &n));
    double lsum = 0;
    for (int m = 0; m < K; m++) {
        double l = 0;
        KN_TRY(load_rows(t, x, y, (size_t)m * (size_t)t->B));
        KN_TRY(kn_trainer_low_refresh(t));
        KN_TRY(kn_program_run(t->prog));
        KN_TRY(output_item(kn_program_output(t->prog, 0), &l));
        lsum += l;
        if (m == 0)
            KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(r->acc), t->dev, kn_tensor_data(t->grad), (size_t)n * sizeof(float)));
        else
            KN_TRY(add_into(t, m == K - 1 ? t->grad : r->acc, r->acc, t->grad));
    }
    *loss = lsum / K;
    return kn_device_scale(t->dev, kn_tensor_data(t->grad), n, 1.0 / K);
}

kn_status kn_step_run(kn_trainer *t, const int32_t *x, const int32_t *y, int rows, double lr, double *loss,
                      double *gnorm) {
    if (!t || !t->prog || !x || !y) return kn_error(KN_ERR_ARG, "kn_step_run: NULL argument");
    const kn_step_runner *r = &t->step;
    int N = r->has_comm ? r->comm.ranks : 1, K = r->micro > 0 ? r->micro : 1;
    if ((int64_t)t->B * N * K != rows)
        return kn_error(KN_ERR_ARG, "kn_step_run: a batch of %d rows is not %d ranks x %d micro-batches x %d rows", rows,
                        N, K, t->B);
    if (r->has_comm) return run_comm(t, x, y, lr, loss, gnorm);
    if (t->eager && t->dev.type != KN_DEVICE_CPU)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_trainer_step: eager mode runs on the CPU only (use graph mode on a GPU)");
    KN_TRY(kn_trainer_check_slabs(t, "kn_trainer_step"));
    double l;
    if (K > 1) {
        KN_TRY(run_accum(t, x, y, &l));
        return update_local(t, l, lr, loss, gnorm);
    }
    KN_TRY(load_rows(t, x, y, 0));
    if (t->eager) {
        KN_TRY(eager_grads(t, &l));
    } else {
        KN_TRY(kn_trainer_low_refresh(t));
        KN_TRY(kn_program_run(t->prog)); /* the gradients are in the slab: bound in kn_step_compile */
        KN_TRY(output_item(kn_program_output(t->prog, 0), &l));
    }
    return update_local(t, l, lr, loss, gnorm);
}
