/* pp_impl.h — pipeline parallelism's private parts, shared by pp.c (the stages, their
 * programs, send/recv), pp_setup.c (the state, the rank's slabs, the gather), pp_run.c (the
 * schedule, the step's hooks) and pp_timeline.c (the report of the last step). */
#ifndef KILN_DIST_PP_IMPL_H
#define KILN_DIST_PP_IMPL_H

#include "kiln/mesh.h"
#include "kiln/step.h"

/* One model stage on this rank (chunk c: model stage s = c*p + rank). */
struct kn_pp_stage {
    int s, l0, l1;            /* model stage; its blocks [l0, l1) */
    bool first, last;         /* holds the embeddings / ln_f, the logits and the loss */
    int np;                   /* parameters it reads */
    int *pidx;                /* owned: their indices (slab order); the backward's outputs 0..np-1 */
    kn_graph *gf, *gb;        /* owned: forward (out: send token or loss, then the stash), backward
                               * (out: the parameters' gradients, then the send token) */
    kn_program *pf, *pb;      /* owned: compiled for the trainer's device and mode */
    int nsaved;
    kn_type *saved;           /* owned: the stashed values' types */
};

/* A micro-batch's stashed activations between its forward and its backward. */
struct kn_pp_slot {
    bool used;
    int micro, chunk;
    int n;
    kn_tensor **t;            /* owned: n tensors on the trainer's device */
    int64_t bytes;
};

/* A collectives context: one per direction (0 forward traffic, 1 backward). */
struct kn_pp_dir {
    kn_pp *pp;
    int dir;
};

/* Sends in flight, each with its own copy of the data. */
struct kn_pp_sends {
    struct kn_pp_dir dir[2];
    kn_collectives coll[2];
    int n, cap;
    kn_comm_req *req;
    kn_tensor **buf;
};

bool kn_pp_stage_reads(const kn_gpt *g, int S, int s, int i);
int kn_pp_owner(const kn_pp *pp, int i);
kn_status kn_pp_stage_build(kn_pp *pp, kn_pp_stage *st);
kn_status kn_pp_stage_compile(kn_pp *pp, kn_pp_stage *st);
void kn_pp_stage_free(kn_pp_stage *st);
kn_status kn_pp_sends_new(kn_pp *pp);
void kn_pp_sends_free(kn_pp *pp);
kn_status kn_pp_sends_progress(kn_pp *pp, bool wait);
/* kn_pp.test_sleep's sleep of s seconds (none for s <= 0). */
void kn_pp_test_sleep(double s);

/* The step runner's hooks of this pipeline (pp_run.c), for kn_step_set_comm. */
void kn_pp_step_hooks(kn_pp *pp, kn_step_comm *sc);
/* Free the trainer's whole-model slabs (pp_setup.c): the rank's own slabs train. */
kn_status kn_pp_drop_full(kn_pp *pp);
/* ZeRO-1 (kn_pp_set_zero1): counts[q] = dp rank q's part of the local slab (kn_dp_shard_ranges
 * of kn_pp.held), *out owned by the caller (kn_free) (pp_setup.c). */
kn_status kn_pp_zero1_counts(const kn_pp *pp, int64_t **out);
/* A blocking all-reduce (sum) of n doubles over c, through a device buffer on NCCL (pp_run.c). */
kn_status kn_pp_sum_f64(kn_pp *pp, kn_comm *c, double *v, int n, const char *what);

#endif /* KILN_DIST_PP_IMPL_H */
