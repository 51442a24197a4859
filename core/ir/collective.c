/* collective.c — running the collective nodes of a graph (kiln/ir.h, "collectives in the
 * graph"), and the one-process context.
 *
 * A collective talks to other ranks, which no kernel can: the interpreter and programs
 * send every node of category KN_CAT_COLLECTIVE here, with the kn_collectives context of
 * the run (data parallelism's, core/dist/dp_buckets.c, reaches the rank's communicator through
 * it). The node's value is a 0-d f32 token, 0: what matters is the order the tokens
 * impose (a bucket's all_reduce_start after its last grad_store, its comm_wait after the
 * start) and what the context does.
 *
 * The local context is one process alone: grad_store copies into a slab of its own, an
 * all-reduce over one rank changes nothing (so does every value collective over one rank;
 * a send to itself waits for the recv of its type), and it checks the protocol: a range is started
 * once before it is waited for, and every start is waited for before the next run starts.
 * `kiln compile` checks a graph with collectives against the one without them with it. */
#include <string.h>

#include "ir/ir_impl.h"

/* The node's value, its operands contiguous. */
static kn_status eval_contiguous(const kn_collectives *c, kn_device dev, int32_t id, const kn_node *n,
                                 const kn_tensor *const *in, kn_tensor **out) {
    if (n->op == KN_OP_COMM_WAIT && in[0]->ndim == 1) { /* an all_gather's buffer, complete: given back */
        KN_TRY(c->run(c->ctx, id, n, in, NULL));
        kn_tensor_free(*out);
        *out = NULL;
        return kn_tensor_alias(out, in[0]);
    }
    if (n->op == KN_OP_ALL_GATHER_START) { /* the buffer the gather fills (the program's slot, or new) */
        int64_t len = n->attrs.stop - n->attrs.start;
        if (*out && ((*out)->dtype != KN_DT_F32 || kn_tensor_numel(*out) != len))
            return kn_error(KN_ERR_INTERNAL, "%s: the buffer's slot is not f32[%lld]", kn_op_name(n->op), (long long)len);
        if (!*out) KN_TRY(kn_tensor_empty_on(out, dev, KN_DT_F32, 1, &len));
        kn_status st = c->run(c->ctx, id, n, in, *out);
        if (st != KN_OK) {
            kn_tensor_free(*out);
            *out = NULL;
        }
        return st;
    }
    if (kn_op_makes_tensor(n->op)) { /* a value collective: the tensor of the node's type it fills */
        kn_type have = {0};
        if (*out) {
            have.dtype = (*out)->dtype;
            have.ndim = (*out)->ndim;
            for (int d = 0; d < have.ndim; d++) have.shape[d] = (*out)->shape[d];
        }
        if (*out && !kn_type_equal(&have, &n->type))
            return kn_error(KN_ERR_INTERNAL, "%s: %%%d: the value's slot does not have the node's type",
                            kn_op_name(n->op), id);
        bool made = !*out;
        if (made) KN_TRY(kn_tensor_empty_on(out, dev, n->type.dtype, n->type.ndim, n->type.shape));
        kn_status st = c->run(c->ctx, id, n, in, *out);
        if (st != KN_OK && made) {
            kn_tensor_free(*out);
            *out = NULL;
        }
        return st;
    }
    KN_TRY(c->run(c->ctx, id, n, in, NULL));
    if (*out) { /* a program placed the token in its arena (on its device) */
        static const float zero = 0.0f;
        if ((*out)->dtype != KN_DT_F32 || kn_tensor_numel(*out) != 1)
            return kn_error(KN_ERR_INTERNAL, "%s: the token's slot is not one f32", kn_op_name(n->op));
        return kn_device_memcpy((*out)->storage->device, kn_tensor_data(*out), KN_CPU, &zero, sizeof zero);
    }
    return kn_tensor_scalar(out, KN_DT_F32, 0.0);
}

kn_status kn_collective_eval(const kn_collectives *c, kn_device dev, int32_t id, const kn_node *n,
                             const kn_tensor *const *in, kn_tensor **out) {
    if (!n || !out) return kn_error(KN_ERR_ARG, "kn_collective_eval: NULL argument");
    if (!c || !c->run)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: no collectives context: the graph talks to other ranks, so run it with "
                        "one (kn_interp_set_collectives, kn_program_set_collectives; kiln train --dist, or "
                        "kn_collectives_local_new for one process)", kn_op_name(n->op));
    /* operands on any device: the context's communicator reads them where they are (MPI
     * host memory, NCCL the rank's GPU); a strided one is first copied contiguous there */
    const kn_tensor *args[KN_MAX_OPERANDS];
    kn_tensor *tmp[KN_MAX_OPERANDS] = {0};
    kn_status st = KN_OK;
    for (int k = 0; k < n->nin && st == KN_OK; k++) {
        if (!in[k]) st = kn_error(KN_ERR_ARG, "%s: operand %d has no value", kn_op_name(n->op), k);
        else st = kn_ir_contiguous(kn_op_name(n->op), in[k], &tmp[k]); /* an alias when it already is */
        args[k] = tmp[k];
    }
    if (st == KN_OK) st = eval_contiguous(c, dev, id, n, args, out);
    for (int k = 0; k < n->nin; k++) kn_tensor_free(tmp[k]);
    return st;
}

/* ---------------------------------------------------------------- one process */

struct kn_collectives_local {
    float *slab;
    int64_t n;
    float *params;  /* the parameter slab an all_gather reads (kn_collectives_local_params) */
    int64_t nparams;
    int64_t open_lo[64], open_hi[64]; /* ranges started and not yet waited for */
    bool open_gather[64];             /* ... by an all_gather (a range may be reduced and gathered at once) */
    int nopen;
    kn_tensor *sent[8];               /* sends to itself not yet received (first in, first out) */
    int nsent;
};

static kn_status local_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    kn_collectives_local *l = ctx;
    for (int k = 0; k < n->nin; k++)
        if (in[k]->storage->device.type != KN_DEVICE_CPU)
            return kn_error(KN_ERR_UNSUPPORTED, "%s: %%%d: the one-process context runs on the CPU (operand %d is not "
                            "there)", kn_op_name(n->op), id, k);
    if (n->op == KN_OP_GRAD_STORE) {
        int64_t m = kn_tensor_numel(in[0]), end = n->attrs.offset + m;
        if (end > l->n) {
            float *s = kn_realloc(l->slab, (size_t)end * sizeof(float));
            if (!s) return kn_error(KN_ERR_OOM, "grad_store: out of memory for the local slab");
            memset(s + l->n, 0, (size_t)(end - l->n) * sizeof(float));
            l->slab = s;
            l->n = end;
        }
        memcpy(l->slab + n->attrs.offset, kn_tensor_data(in[0]), (size_t)m * sizeof(float));
        return KN_OK;
    }
    if (n->op == KN_OP_ALL_REDUCE || n->op == KN_OP_ALL_GATHER || n->op == KN_OP_REDUCE_SCATTER ||
        n->op == KN_OP_SEND || n->op == KN_OP_RECV) {
        if (n->attrs.parts != 1)
            return kn_error(KN_ERR_UNSUPPORTED, "%s: %%%d: spans %lld ranks of mesh axis %lld; the one-process context "
                            "has one (run it under mpiexec with a mesh: kiln train --mesh)", kn_op_name(n->op), id,
                            (long long)n->attrs.parts, (long long)n->attrs.mesh);
        if (n->op == KN_OP_SEND) { /* to itself: kept until a recv of its type takes it */
            if (l->nsent == 8) return kn_error(KN_ERR_ARG, "send: %%%d: more than 8 sends not yet received", id);
            KN_TRY(kn_tensor_clone(&l->sent[l->nsent], in[0]));
            l->nsent++;
            return KN_OK;
        }
        const kn_tensor *src = in[0];
        int k = 0;
        if (n->op == KN_OP_RECV) {
            while (k < l->nsent && (l->sent[k]->dtype != out->dtype || kn_tensor_numel(l->sent[k]) != kn_tensor_numel(out)))
                k++;
            if (k == l->nsent)
                return kn_error(KN_ERR_ARG, "recv: %%%d: no send of a %s[%lld] is waiting", id, kn_dtype_name(out->dtype),
                                (long long)kn_tensor_numel(out));
            src = l->sent[k];
        }
        /* over one rank every value collective is the identity */
        memcpy(kn_tensor_data(out), kn_tensor_data(src), (size_t)kn_tensor_numel(src) * kn_dtype_size(src->dtype));
        if (n->op == KN_OP_RECV) {
            kn_tensor_free(l->sent[k]);
            for (; k + 1 < l->nsent; k++) l->sent[k] = l->sent[k + 1];
            l->nsent--;
        }
        return KN_OK;
    }
    bool gather = n->op == KN_OP_ALL_GATHER_START || in[0]->ndim == 1;
    int k = 0;
    while (k < l->nopen && (l->open_lo[k] != n->attrs.start || l->open_hi[k] != n->attrs.stop || l->open_gather[k] != gather)) k++;
    if (n->op == KN_OP_ALL_GATHER_START) { /* one rank's shard is the whole: the parameters themselves */
        if (n->attrs.stop > l->nparams)
            return kn_error(KN_ERR_ARG, "all_gather_start: %%%d: slab range [%lld, %lld) reaches past the %lld "
                            "parameters given (kn_collectives_local_params)", id, (long long)n->attrs.start,
                            (long long)n->attrs.stop, (long long)l->nparams);
        memcpy(kn_tensor_data(out), l->params + n->attrs.start, (size_t)(n->attrs.stop - n->attrs.start) * sizeof(float));
    }
    if (n->op == KN_OP_ALL_REDUCE_START || n->op == KN_OP_REDUCE_SCATTER_START || n->op == KN_OP_ALL_GATHER_START) {
        if (n->op != KN_OP_ALL_GATHER_START && n->attrs.stop > l->n)
            return kn_error(KN_ERR_ARG, "%s: %%%d: slab range [%lld, %lld) reaches past the %lld floats "
                            "stored", kn_op_name(n->op), id, (long long)n->attrs.start, (long long)n->attrs.stop, (long long)l->n);
        if (k < l->nopen) return kn_error(KN_ERR_ARG, "%s: %%%d: range [%lld, %lld) is already in flight",
                                          kn_op_name(n->op), id, (long long)n->attrs.start, (long long)n->attrs.stop);
        if (l->nopen == 64) return kn_error(KN_ERR_ARG, "%s: more than 64 requests in flight", kn_op_name(n->op));
        l->open_lo[l->nopen] = n->attrs.start;
        l->open_gather[l->nopen] = gather;
        l->open_hi[l->nopen++] = n->attrs.stop;
        return KN_OK; /* the sum over one rank is the slab itself (and its one shard the whole) */
    }
    if (k == l->nopen)
        return kn_error(KN_ERR_ARG, "comm_wait: %%%d: range [%lld, %lld) was not started", id, (long long)n->attrs.start,
                        (long long)n->attrs.stop);
    l->open_lo[k] = l->open_lo[l->nopen - 1];
    l->open_gather[k] = l->open_gather[l->nopen - 1];
    l->open_hi[k] = l->open_hi[--l->nopen];
    return KN_OK;
}

kn_status kn_collectives_local_new(kn_collectives_local **out, kn_collectives *c) {
    if (!out || !c) return kn_error(KN_ERR_ARG, "kn_collectives_local_new: NULL argument");
    kn_collectives_local *l = kn_calloc(1, sizeof *l);
    if (!l) return kn_error(KN_ERR_OOM, "kn_collectives_local_new: out of memory");
    *c = (kn_collectives){.ctx = l, .run = local_run};
    *out = l;
    return KN_OK;
}

kn_status kn_collectives_local_params(kn_collectives_local *l, const float *params, int64_t n) {
    if (!l || (!params && n > 0) || n < 0) return kn_error(KN_ERR_ARG, "kn_collectives_local_params: NULL argument");
    float *c = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    if (!c) return kn_error(KN_ERR_OOM, "kn_collectives_local_params: out of memory for %lld floats", (long long)n);
    if (n > 0) memcpy(c, params, (size_t)n * sizeof *c);
    kn_free(l->params);
    l->params = c;
    l->nparams = n;
    return KN_OK;
}

void kn_collectives_local_free(kn_collectives_local *l) {
    if (!l) return;
    kn_free(l->params);
    kn_free(l->slab);
    for (int k = 0; k < l->nsent; k++) kn_tensor_free(l->sent[k]);
    kn_free(l);
}

const float *kn_collectives_local_slab(const kn_collectives_local *l, int64_t *n) {
    if (n) *n = l ? l->n : 0;
    return l ? l->slab : NULL;
}
