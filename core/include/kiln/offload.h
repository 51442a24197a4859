/* kiln/offload.h — ZeRO-Offload (`kiln train --offload optimizer`): the optimizer's state
 * and its step on the host, the GPU keeping only what the forward and backward read.
 *
 * A GPU step of AdamW keeps, beside the parameters (4 bytes each) and the gradients (4),
 * its moments m and v (8 bytes a parameter): half of the 16P bytes of training state.
 * ZeRO-Offload (Ren et al., 2021; the seed's chapter 20.3) moves them to pinned host
 * memory with a host copy of the parameters (the fp32 master; kiln's programs read the f32
 * slab on the GPU in every precision, bf16's biases and norm gains and the source of its
 * weight copies, so the GPU keeps its own), and each step:
 *     the backward (and the data-parallel reduction) on the GPU -> the clip on the GPU
 *     -> gradients down (D2H, 4 bytes a parameter) -> AdamW on the host (kn_optim_step_range:
 *     the very loop of the CPU optimizer) -> parameters up (H2D, 4 bytes a parameter)
 * in chunks, so that chunk k+1 comes down while the host updates chunk k and chunk k-1 goes
 * up. The GPU gives back 8 bytes a parameter (the moments); the host holds 16 (master,
 * gradients, m, v); SGD's momentum is 4 and 12. The price is the link: 8 bytes a parameter
 * cross PCIe every step (the copies overlap each other and the host's update, not the
 * backward: the clip needs every gradient's norm first), and
 * the host's AdamW runs at the host's memory bandwidth. With data parallelism each rank
 * offloads what it updates: DDP the whole slab, ZeRO-1 and ZeRO-2 its shard (the
 * all-gather of the parameters follows the host step on the GPU, as without offload).
 *
 * The clip (and the loss scale's unscaling and overflow check) stays on the GPU where it
 * was: only the update moves, and the result is the GPU step's bit for bit: both
 * optimizers compute each element in double, the same operations in the same order, and
 * round once when storing (the GPU kernel's products are __dmul_rn, never fused into a
 * multiply-add: tests/dist/test_optim_ptx.sh), and bf16's weight copies are rounded alike
 * (the GPU kernel's store; after the host step, the trainer's cast before the next run).
 * tests/dist/test_offload_gpu.sh demands equality; any difference is an offload bug.
 *
 * Not offloaded: ZeRO-3 (its update writes the parameter shard its gathers read:
 * refused until checked), pipeline and tensor parallel meshes (refused by kiln train), CPU
 * training (the state is on the host already: refused by kiln train; the library runs it,
 * with plain copies, as the CPU tests' check of the wiring). The next forward waits for
 * every parameter chunk (the host waits for the last upload before the step returns).
 * The host's buffers come from the device's storage table (kn_device_host_alloc: pinned on
 * a GPU), so on KN_CPU the same code runs with plain copies: the CPU tests check the
 * chunked step against kn_optim_step, and the wiring against training without it, bit for
 * bit (tests/core/test_offload.c, tests/dist/test_offload_cli.sh).
 *
 * Code: core/nn/offload.c (the host step, one process), core/dist/offload_dp.c (data
 * parallelism's hooks, kn_offload_dp and kn_offload_sync). */
#ifndef KILN_OFFLOAD_H
#define KILN_OFFLOAD_H

#include "kiln/nn.h"
#include "kiln/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an offload holds and what its last step did. */
typedef struct kn_offload_stats {
    int64_t n;             /* floats of the slab range it updates */
    int64_t chunks;        /* chunks a step is cut into */
    int64_t host_bytes;    /* pinned host bytes held: master copy, gradients, optimizer state */
    int64_t device_freed;  /* device bytes of optimizer state given back when it attached */
    int64_t bytes_down, bytes_up; /* per step: gradients D2H, parameters H2D */
    int64_t steps;         /* host steps taken */
    double step_s;         /* the last step: seconds from its call to its return */
    double wait_down_s;    /* ... of which the host waited for gradient chunks */
    double host_s;         /* ... computed AdamW / SGD on the host */
    double wait_up_s;      /* ... waited for the last parameter chunks to go up */
} kn_offload_stats;

typedef struct kn_offload kn_offload;
struct kn_dp; /* kiln/dist.h: data parallelism, a layer above this header's (core/nn) */

/* `--offload`: "none" (*on false) or "optimizer" (*on true); KN_ERR_ARG naming the text
 * otherwise. */
kn_status kn_offload_parse(const char *text, bool *on);

/* An offload of o's optimizer (kind, config, n, n_decay, step copied) for slabs on dev:
 * pinned host memory for the master copy of param[0..n) (copied from dev now), the
 * gradients and the state (state: o->state_len floats on dev, copied; NULL: zeros).
 * chunk: floats per copy (0: 4M, 16 MB). Errors: a bad optimizer, chunk < 0, out of
 * (host) memory, device errors. */
kn_status kn_offload_new(kn_offload **out, kn_device dev, const kn_optim *o, const float *param, const float *state,
                         int64_t chunk);
void kn_offload_free(kn_offload *f); /* NULL is fine; detaches a hook it set (below) */

/* One update of param[0..n) (on dev) with grad[0..n) (on dev, clipped: final), lr: the
 * gradients come down chunk by chunk on a copy stream, each is stepped on the host as soon
 * as it is there, and the updated chunk goes up on another stream; returns when every
 * chunk is up (the next forward may read param). The same bits as kn_optim_step on the
 * host copies; o->step counted once. */
kn_status kn_offload_step(kn_offload *f, float *param, const float *grad, double lr);
/* The state (m then v, or SGD's momentum: state_len floats) into dst on dst_dev. */
kn_status kn_offload_state(const kn_offload *f, kn_device dst_dev, float *dst);
/* The host optimizer (its config, n, step; its state pointer is the pinned slab). */
const kn_optim *kn_offload_optim(const kn_offload *f);
kn_offload_stats kn_offload_stats_of(const kn_offload *f);

/* The offload of a trainer of one process (t->step without communication): its optimizer
 * state moves to the host (a GPU's device copy, t->state, 8P bytes for AdamW, is freed)
 * and t->optim_hook runs the host step. On the CPU it is the same arithmetic with plain
 * copies and gains nothing (kiln train refuses --device cpu): the CPU tests use it to check
 * the wiring bit for bit. KN_ERR_UNSUPPORTED for a trainer whose step has communication
 * (use kn_offload_dp), KN_ERR_ARG for one offloaded already. */
kn_status kn_offload_trainer(kn_offload **out, kn_trainer *t, int64_t chunk);
/* The offload of what rank d->comm->rank updates (DDP: the slab; ZeRO-1/2: its shard),
 * after kn_dp_new: the rank's optimizer state (or shard state) moves to the host, given
 * back on GPU ranks (CPU ranks: tests only, as above). Refuses ZeRO-3
 * (KN_ERR_UNSUPPORTED, saying why). */
kn_status kn_offload_dp(kn_offload **out, struct kn_dp *d, int64_t chunk);
/* The host state where a checkpoint reads it: one process and DDP the trainer's host copy
 * (t->opt.state, for kn_trainer_sync_host and kn_checkpoint_save); ZeRO-1/2 the shard's
 * state back on the device (for kn_dp_gather_state). The steps stay offloaded. */
kn_status kn_offload_sync(kn_offload *f);

#ifdef __cplusplus
}
#endif

#endif /* KILN_OFFLOAD_H */
