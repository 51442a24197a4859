/* kiln/nn.h — neural-network layers on the IR builder, the GPT model, its parameter slab,
 * a trainer that compiles one training step into a graph, and checkpoints.
 *
 * Layers are plain functions from builder values to builder values (kiln/ir.h): they work
 * in eager mode (each op runs at once) and in graph mode (the ops are recorded), and the
 * two agree bitwise. Parameters are not owned by layers: a model lays out all of its
 * parameters in ONE contiguous f32 slab (kn_params), in a fixed order with the matrices
 * (which get weight decay) first, and hands each layer views into it. The gradients and
 * the optimizer state are slabs of the same layout (kiln/optim.h).
 *
 * The GPT is GPT-2's architecture at a small size: token and position embeddings, `layers`
 * pre-norm blocks (x + attn(ln_1(x)), then x + mlp(ln_2(x))), a final layernorm, and an
 * output layer tied to the token embedding. Parameter names follow Hugging Face's GPT-2
 * ("h.0.attn.c_attn.weight", weights stored [in, out] as in its Conv1D), so a checkpoint
 * reads like one. Initialization is GPT-2's: N(0, 0.02) for weights and embeddings, the
 * residual projections (attn.c_proj, mlp.c_proj) scaled by 1/sqrt(2 * layers), biases 0,
 * layernorm gains 1; every tensor from its own Philox sub-stream of the seed. */
#ifndef KILN_NN_H
#define KILN_NN_H

#include "kiln/ir.h"
#include "kiln/program.h"
#include "kiln/optim.h"
#include "kiln/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- layers */

/* x [..., in] @ w [in, out] + bias [out] -> [..., out]. */
kn_val kn_nn_linear(kn_builder *b, kn_val x, kn_val w, kn_val bias);
/* Layernorm over the last axis with eps 1e-5 (GPT-2's). */
kn_val kn_nn_layernorm(kn_builder *b, kn_val x, kn_val w, kn_val bias);
/* Causal multi-head self-attention on x [B*T, D] (rows ordered batch-major):
 * qkv = x @ w_qkv [D, 3D] + b_qkv; per head softmax(q k^T / sqrt(D/H), causal) v;
 * heads concatenated, then @ w_proj [D, D] + b_proj. Returns [B*T, D]. */
kn_val kn_nn_attention(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv,
                       kn_val w_proj, kn_val b_proj);
/* The same, also handing out the keys and values it attends over (*k_out, *v_out: [B, H, T,
 * D/H], either may be NULL): what a KV cache keeps (kiln/infer.h). */
kn_val kn_nn_attention_kv(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv,
                          kn_val w_proj, kn_val b_proj, kn_val *k_out, kn_val *v_out);
/* Attention's two ends, for variants of its middle (the KV cache's decode step): qkv[0..3)
 * receive q, k and v [B, H, T, D/H] of x [B*T, D] (the builder's status is returned), and
 * kn_nn_heads_merge turns y [B, H, T, D/H] back into [B*T, D] and applies the output
 * projection. */
kn_status kn_nn_qkv(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv, kn_val qkv[3]);
kn_val kn_nn_heads_merge(kn_builder *b, kn_val y, kn_val w_proj, kn_val b_proj);
/* gelu(x @ w_fc + b_fc) @ w_proj + b_proj (GELU with the tanh approximation). */
kn_val kn_nn_mlp(kn_builder *b, kn_val x, kn_val w_fc, kn_val b_fc, kn_val w_proj, kn_val b_proj);

/* ---------------------------------------------------------------- the parameter slab */

typedef struct kn_param_info {
    char name[KN_NAME_MAX];
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int64_t offset, numel;   /* where it lives in the slab, in floats */
    bool decay;              /* gets weight decay (matrices and embeddings) */
    double init_std;         /* > 0: N(0, init_std); 0: filled with init_value */
    double init_value;
} kn_param_info;

typedef struct kn_params {
    int count;
    kn_param_info *info;     /* owned, count entries, in slab order */
    int64_t n;               /* floats in the slab */
    int64_t n_decay;         /* the decayed parameters are slab[0, n_decay) */
    kn_tensor *slab;         /* owned: f32 [n] */
    kn_tensor **views;       /* owned: count tensors viewing the slab (info[i].shape) */
    float *data;             /* the slab's floats */
} kn_params;

/* One view per parameter (info[i].shape) into `slab`, a flat float tensor laid out like
 * p->slab on any device (the parameters, their gradients, a GPU copy, the bf16 copies of
 * mixed precision). *out receives an owned array of p->count tensors, freed with
 * kn_params_views_free; nothing on failure. */
kn_status kn_params_views(const kn_params *p, const kn_tensor *slab, kn_tensor ***out);
void kn_params_views_free(const kn_params *p, kn_tensor **views); /* NULL is fine */

/* ---------------------------------------------------------------- GPT */

typedef struct kn_gpt_config {
    int vocab;     /* tokens, >= 1 */
    int context;   /* the longest sequence (positions), >= 1 */
    int layers;    /* transformer blocks, >= 1 */
    int width;     /* model dimension D, a multiple of heads */
    int heads;     /* attention heads, >= 1 */
} kn_gpt_config;

/* KN_ERR_ARG naming the field when a config is unusable. */
kn_status kn_gpt_config_check(const kn_gpt_config *c);

typedef struct kn_gpt {
    kn_gpt_config cfg;
    kn_params p;
} kn_gpt;

/* Lay out the parameters and allocate the zeroed slab. */
kn_status kn_gpt_new(kn_gpt *g, const kn_gpt_config *cfg);
void kn_gpt_free(kn_gpt *g);
/* GPT-2 initialization from Philox seed `seed` (sub-stream i for parameter i). */
void kn_gpt_init(kn_gpt *g, uint64_t seed);
/* The index of a parameter by name, -1 when absent. */
int kn_gpt_find(const kn_gpt *g, const char *name);

/* Append the model to a builder: declares every parameter (kn_param, in slab order) into
 * pvals[0..p.count), then the forward pass of idx [B, T] (i32, T <= context). *logits
 * receives [B*T, vocab]. When targets is a valid [B, T] i32 value, *loss receives the mean
 * cross-entropy (0-d); pass KN_VAL_NONE for no loss (loss may then be NULL). Returns the
 * builder's status. */
kn_status kn_gpt_build(kn_builder *b, const kn_gpt *g, kn_val idx, kn_val targets, kn_val *pvals,
                       kn_val *logits, kn_val *loss);

/* A part of the model, for a pipeline stage (core/dist/pp.c) and for kn_gpt_build itself:
 * blocks [l0, l1) appended to the builder, on the parameters pvals (gpt_layout's order;
 * only those the part reads need be valid). embed: `in` is idx [B, T] (i32) and the token
 * and position embeddings come first; otherwise `in` is the activation [B*T, D]. head: the
 * final layernorm, the logits tied to wte (*logits) and, with valid targets [B, T], the mean
 * cross-entropy (*loss) follow. *out receives the part's last value: the activation
 * [B*T, D], or the logits, or the loss. The same ops in the same order as the whole model,
 * so the parts chained compute its very numbers. Returns the builder's status. */
kn_status kn_gpt_build_part(kn_builder *b, const kn_gpt *g, int l0, int l1, bool embed, bool head, kn_val in, int B,
                            int T, kn_val targets, const kn_val *pvals, kn_val *out, kn_val *logits, kn_val *loss);

/* The GPT of cfg captured as the trainer captures it, for the passes to compile
 * (`kiln compile --gpt`, the pass tests): inputs "idx" and "targets" (i32 [B, T]), the
 * model's parameters, and outputs (loss, logits) for the forward graph, or autograd's joint
 * graph (outputs: loss, then every parameter's gradient) when joint. No activation is
 * allocated; the parameter slab is allocated (zeroed) and freed. (core/nn/gpt_graph.c) */
kn_status kn_gpt_graph(const kn_gpt_config *cfg, int B, int T, bool joint, kn_graph **out);

/* ---------------------------------------------------------------- training */

/* One training step compiled once: the forward graph of (B, T), its joint
 * forward+backward graph (kiln/autograd.h), an interpreter bound to the parameter slab
 * (aliased, so optimizer updates are seen by the next run) and to the batch buffers. */
typedef struct kn_trainer {
    kn_gpt *model;           /* borrowed */
    int B, T;
    kn_graph *fwd, *joint;   /* owned */
    kn_program *prog;        /* owned: joint compiled for dev (kiln/program.h) */
    kn_program *eval;        /* owned: fwd (loss only) compiled for dev */
    kn_optim opt;
    double clip;             /* global-norm clip (0: none) */
    bool eager;              /* step in eager mode (rebuild and run op by op, kn_backward)
                              * instead of replaying the compiled joint graph; same bits */
    bool compiled;           /* the programs are fused generated kernels: C on the CPU, CUDA
                              * on a GPU (KN_PROGRAM_COMPILED; set with kn_trainer_set_compiled) */
    bool cuda_emu;           /* compiled on the CPU: the CUDA kernels under the emulator
                              * (kn_program_opts.cuda_emu; a test of the GPU's code path) */
    bool no_plan;            /* compiled: the step without a memory plan (kn_program_opts.no_plan;
                              * kiln bench --no-plan, the ablation's row) */
    bool cuda_graph;         /* compiled on a GPU: replay the step as one CUDA graph
                              * (kn_program_set_cuda_graph) */
    const char *passes;      /* borrowed: the pass list the programs are compiled with
                              * (kiln/passes.h; NULL: none), applied by kn_trainer_set_compiled */
    /* The step's state: ONE set, on dev (KN_CPU unless kn_trainer_to_device moved it).
     * On the CPU the parameter slab and the optimizer state are the model's and the
     * optimizer's own (params and views borrowed, state NULL: opt.state). On a GPU they are
     * owned device copies, and model->p and opt.state on the host are brought up to date
     * only by kn_trainer_sync_host (checkpoints, sampling). */
    kn_device dev;
    kn_tensor *x, *y;        /* owned, on dev: i32 [B, T], bound as inputs "idx" and "targets" */
    kn_tensor *grad;         /* owned, on dev: f32 [p.n], the gradient slab */
    kn_tensor **grad_views;  /* owned: views of grad shaped like the parameters */
    kn_tensor *params;       /* on dev: f32 [p.n], the parameter slab the programs read */
    kn_tensor **views;       /* views of params shaped like the parameters (bound by name) */
    kn_tensor *state;        /* on a GPU: owned, f32 [opt.state_len]; on the CPU NULL */
    /* Gradient-sync hook (NULL: none), called every step between the backward pass and the
     * update, with the gradient slab (n floats, on dev) already filled: where distributed
     * training plugs in (an all-reduce over the slab for data parallelism, a
     * reduce-scatter for a sharded optimizer). Clip and the optimizer run after it. */
    kn_status (*grad_hook)(struct kn_trainer *t, float *grad, int64_t n, void *ctx);
    void *grad_hook_ctx;
    /* Optimizer hook (NULL: the device's optimizer, kn_device_optim_step), called by the
     * update in place of it after the clip, with the device slabs of what the step updates
     * (one process and DDP: the whole slab; ZeRO-1/2: this rank's shard, kiln/dist.h); it
     * counts the step itself. ZeRO-Offload's host step plugs in here (kiln/offload.h); the
     * weights' low copies are rounded again before the next run. */
    kn_status (*optim_hook)(void *ctx, float *param, const float *grad, double lr);
    void *optim_hook_ctx;
    /* Loss scaling (kiln/optim.h, core/nn/loss_scale.c): mode NONE until
     * kn_trainer_set_loss_scale. Each step then differentiates loss * scale, divides the
     * gradients by it before the clip, and skips the update when they hold inf or NaN. */
    kn_loss_scaler scaler;
    kn_tensor *scale_in;     /* owned, on dev: f32 0-d, the scale, bound as input "loss_scale"
                              * (NULL: no scaling) */
    bool skipped;            /* the last kn_trainer_step found inf/NaN and skipped its update */
    bool inject_inf;         /* a test hook: the next step puts +inf into the first gradient
                              * (before the check), then clears it */
    /* Mixed precision's weight copies (the pass lowparams in t->passes, kiln/passes.h): when
     * the programs read params NAME@bf16 (or @f16), `low` holds every parameter rounded to
     * low_dt, one slab laid out as the f32 one (owned, on dev), and its views are bound by
     * those names. The update writes it in the same pass as the f32 slab
     * (kn_device_optim_step_low). low_fresh: low is the rounded slab; a compile, a move or
     * an update the trainer did not make (data parallelism's) clears it, and the next run
     * rounds the slab first (kn_trainer_low_refresh). low NULL, low_dt f32: no copies. */
    kn_dtype low_dt;
    kn_tensor *low;
    kn_tensor **low_views;
    bool low_fresh;
    /* The step runner (kiln/step.h, core/nn/step.c): the micro-batches and the
     * communication hooks; it compiles `prog` and takes every step. */
    kn_step_runner step;
} kn_trainer;

kn_status kn_trainer_new(kn_trainer *t, kn_gpt *model, int B, int T, const kn_optim_config *ocfg, double clip);
void kn_trainer_free(kn_trainer *t);
/* Recompile the step and eval programs as generated C (on) or node by node (off), with the
 * pass list t->passes. Only the CPU has a C renderer: on a GPU the programs stay node by
 * node. */
kn_status kn_trainer_set_compiled(kn_trainer *t, bool on);
/* Round the parameter slab into the weights' low copies unless they are fresh (see
 * kn_trainer.low); nothing without copies. Every run of the trainer's programs calls it. */
kn_status kn_trainer_low_refresh(kn_trainer *t);
/* Forward + backward on the batch (x, y: B*T tokens each; micro*B*T with micro-batches,
 * kn_step_set_comm), clip, one optimizer step at lr.
 * *loss gets the batch's loss before the update, *gnorm (may be NULL) the gradient norm.
 * With t->eager set, the forward and backward run eagerly (the teaching and ablation
 * baseline); both modes call the same kernels in the same order, so they agree bitwise. */
kn_status kn_trainer_step(kn_trainer *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm);
/* Only the update of a step: clip the trainer's gradient slab and run the optimizer at
 * lr, on the trainer's device (its backend's kernels); *gnorm (may be NULL) the norm.
 * kiln bench times it on its own. */
kn_status kn_trainer_optimize(kn_trainer *t, double lr, double *gnorm);
/* Loss scaling for the following steps (s copied; kiln/optim.h): mode NONE turns it off.
 * Turning it on or off recompiles the step with or without the 0-d input "loss_scale"
 * that multiplies the loss before the backward pass (the loss reported stays unscaled);
 * a later change of the scale is only a 4-byte upload. With scaling on, kn_trainer_step
 * divides the gradients by the scale before the clip, and when they hold inf or NaN
 * (the loss being finite) it skips the update: parameters, optimizer state and opt.step
 * are untouched, t->skipped is set, the skip is logged (KN_LOG_WARN), and *gnorm gets the
 * non-finite norm; the scaler then follows kn_loss_scale_update. In f32 with a
 * power-of-two scale the steps are bitwise those of an unscaled trainer. Call it after
 * kn_trainer_to_device. With data parallelism (kiln/dist.h) every rank applies the same scale
 * and an overflow on any rank skips the step on all (core/nn/step.c). */
kn_status kn_trainer_set_loss_scale(kn_trainer *t, const kn_loss_scaler *s);
/* The loss on a batch without updating anything. */
kn_status kn_trainer_eval(kn_trainer *t, const int32_t *x, const int32_t *y, double *loss);
/* Move the step to dev (a CUDA device): copy the parameter slab (model->p) and the
 * optimizer state (opt.state) there, allocate the gradient slab and batch there, and bind
 * both interpreters to the device tensors; from then on kn_trainer_step and
 * kn_trainer_eval run the compiled graphs with CUDA kernels, clip and update on the GPU,
 * and read back only the loss and the gradient norm. Call it after loading a checkpoint.
 * dev == KN_CPU, or the device the trainer already is on, is a no-op. Eager mode is
 * CPU-only (kn_trainer_step then fails with KN_ERR_UNSUPPORTED). Errors: KN_ERR_UNSUPPORTED
 * (built without CUDA), KN_ERR_DEVICE (no usable GPU), naming kn_trainer_to_device. */
kn_status kn_trainer_to_device(kn_trainer *t, kn_device dev);
/* Copy the device parameter slab into model->p and the device optimizer state into
 * opt.state (before a checkpoint, sampling, or reading the parameters). No-op on the CPU. */
kn_status kn_trainer_sync_host(kn_trainer *t);
/* Look inside one step without taking it (core/nn/probe.c), wherever the trainer runs: on
 * the batch (x, y: B*T tokens each, checked against the vocabulary), *loss (may be NULL)
 * gets the loss, grad (may be NULL; p.n host floats, slab order) the UNclipped gradient
 * from the trainer's own joint graph, logits (may be NULL; B*T*vocab host floats) the
 * logits [B*T, vocab] from a forward-only graph of the same model. Parameters, optimizer
 * state and step are not changed. For checks against a reference (`kiln dump`). */
kn_status kn_trainer_probe(kn_trainer *t, const int32_t *x, const int32_t *y, double *loss, float *grad,
                           float *logits);

/* Sampling: extend prompt ids[0..n0) to n tokens (ids has room for n), each drawn from
 * softmax(logits / temperature) at the last position with the Philox stream `rng`
 * (temperature 0: argmax). The model sees the last min(len, context) tokens. */
kn_status kn_gpt_sample(const kn_gpt *g, int32_t *ids, int n0, int n, double temperature, kn_rng *rng);

/* ---------------------------------------------------------------- checkpoints */

/* Save the parameters (one safetensors tensor per parameter, named as in the model) and,
 * when opt is not NULL, the optimizer state ("optim.state", f32 [state_len]); meta adds
 * string pairs to "__metadata__" beside the model config kiln writes itself
 * ("kiln.vocab", "kiln.context", "kiln.layers", "kiln.width", "kiln.heads",
 * "kiln.optim.step"). */
kn_status kn_checkpoint_save(const char *path, const kn_gpt *g, const kn_optim *opt, int n_meta,
                             const char *const *keys, const char *const *values);
/* Read a checkpoint's model config (from its metadata) so the caller can build the model. */
kn_status kn_checkpoint_config(const char *path, kn_gpt_config *cfg);
/* Load the parameters into g (same config; every tensor checked by name, dtype and shape)
 * and, when opt is not NULL, the optimizer state and step (same kind and size). *st
 * (optional) receives the opened file for reading further metadata; free it with
 * kn_safetensors_free. */
struct kn_safetensors;
kn_status kn_checkpoint_load(const char *path, kn_gpt *g, kn_optim *opt, struct kn_safetensors *st);

/* ---------------------------------------------------------------- held-out loss (kiln eval, quantization) */
/* The mean loss of g over nbatches held-out batches of [B, T] drawn from tokens[0..n) as
 * `kiln train` draws its evaluation batches (kn_batch_sample, stream 1, batch e), with the
 * forward graph compiled node by node on the CPU after `passes` ("" or NULL: fp32 as
 * recorded; "autocast:bf16"; "quantize:w8"; "quantize:w8a8"). Errors: bad sizes, a token
 * outside the vocabulary, a pass list kn_passes_run refuses (core/nn/quant_eval.c), a
 * calibrated scheme (quantize:w8a8-static, -smooth: kn_gpt_heldout_loss_q in kiln/quant.h
 * takes the calibration batches they need). */
kn_status kn_gpt_heldout_loss(const kn_gpt *g, const char *passes, const int32_t *tokens, int64_t n, int B, int T,
                              uint64_t seed, int nbatches, double *loss);

#ifdef __cplusplus
}
#endif

#endif /* KILN_NN_H */
