/* ddp.c — data parallelism as a pass: DDP's bucketed all-reduce placed in the joint graph.
 *
 * Input: a joint graph whose outputs are the loss and then one f32 gradient per parameter,
 * in slab order (the trainer's: kiln/nn.h). The slab's layout is read from the graph:
 * parameter i's gradient (output 1 + i) lives at the sum of the earlier ones' sizes, and
 * it gets weight decay when it is a matrix (two or more axes), as the GPT's layout says.
 * The buckets are lab 10's (kn_dp_buckets over that layout, kiln/passes.h: the same buckets
 * core/dist/dp.c sets up from the model's slab): contiguous slab ranges of whole
 * parameters, formed from the slab's end, which the backward fills first.
 *
 * The pass rewrites the graph so that communication is part of it (kiln/ir.h, "collectives
 * in the graph"):
 *   - right after the node that makes a gradient: `grad_store` of it into the gradient slab
 *     at its offset, ordered after the bucket's previous store by a token;
 *   - right after a bucket's last store: `all_reduce_start` of the bucket's slab range, so
 *     the all-reduce runs while the backward computes the gradients of earlier layers;
 *   - at the end, where the optimizer takes over: one `comm_wait` per bucket, in slab order.
 * The outputs become the loss and the buckets' wait tokens: the gradients now live in the
 * slab (they die at their store, not at the end of the graph). Nodes are placed in
 * definition order, so the schedule (a step per node, or a fused kernel at its last node)
 * starts each bucket as early as its inputs allow; `kiln compile --emit-ir` shows where.
 *
 * Argument: the bucket size in MB (ddp:0.5); 25 when none (PyTorch's default).
 *
 * `zero` is the same pass for ZeRO-1 and ZeRO-2: the buckets reduce-scatter
 * (reduce_scatter_start: each rank receives the sum of its shard's part) instead of
 * all-reducing. Where a store goes (the full gradient slab for ZeRO-1, a bucket's staging
 * buffer for ZeRO-2) is the context's business, not the graph's. */
#include <stdlib.h>
#include <string.h>

#include "kiln/passes.h"

static kn_status parse_mb(const char *arg, double *mb) {
    *mb = 25.0;
    if (!arg || !*arg) return KN_OK;
    char *end = NULL;
    *mb = strtod(arg, &end);
    if (end == arg || *end || !(*mb > 0) || *mb > 1e6)
        return kn_error(KN_ERR_ARG, "ddp/zero: bucket size '%s': expected a number of MB > 0 (ddp:25)", arg);
    return KN_OK;
}

kn_status kn_ddp_check_arg(const char *arg) {
    double mb;
    return parse_mb(arg, &mb);
}

/* Append a node (op, operands, attrs) to ng; its id into *id. */
static kn_status emit(kn_graph *ng, kn_op op, int nin, const int32_t *in, const kn_attrs *a, int32_t *id) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = nin;
    for (int k = 0; k < nin; k++) n.in[k] = in[k];
    n.attrs = *a;
    n.type = (kn_type){KN_DT_F32, 0, {0}};
    n.scope = KN_SCOPE_NONE;
    return kn_graph_add_node(ng, &n, id);
}

typedef struct ddp_state {
    kn_slab_layout p;      /* the layout read from the outputs (info: owned) */
    kn_dp_bucket *buckets;
    int nbuckets;
    int *bucket_of;        /* per parameter */
    int *first, *next;     /* per node: the first parameter whose gradient it is; per parameter: the next */
    int32_t *map;          /* old node id -> new */
    int32_t *tok, *start;  /* per bucket: the last store's token, the start (new ids) */
    int *left;             /* per bucket: stores still to come */
    /* zero3: the parameters gathered (see "ZeRO-3" above) */
    int *param_of;         /* per old node: the parameter it is (a param node), else -1 */
    int *win_of;           /* per bucket x phase (0 forward, 1 backward): its window, -1: none */
    int32_t *win_first;    /* per window: its first reader (old id), sorted */
    int *win_bucket, nwin;
    int32_t *win_start, *win_buf; /* per window: all_gather_start, comm_wait (new ids; -1: not yet) */
    int32_t *view;         /* per parameter x phase: its view into the gathered bucket (new id, -1) */
} ddp_state;

static void state_free(ddp_state *s) {
    kn_free((void *)s->p.info);
    kn_free(s->buckets);
    kn_free(s->bucket_of);
    kn_free(s->first);
    kn_free(s->next);
    kn_free(s->map);
    kn_free(s->tok);
    kn_free(s->start);
    kn_free(s->left);
    kn_free(s->param_of);
    kn_free(s->win_of);
    kn_free(s->win_first);
    kn_free(s->win_bucket);
    kn_free(s->win_start);
    kn_free(s->win_buf);
    kn_free(s->view);
}

/* The joint graph's layout and buckets; refuses what is not a joint graph. */
static kn_status read_layout(const kn_graph *g, size_t bucket_bytes, ddp_state *s) {
    int count = g->noutputs - 1;
    if (count < 1) return kn_error(KN_ERR_ARG, "ddp/zero: the graph has %d outputs: a joint graph has the loss, then a "
                                   "gradient per parameter", g->noutputs);
    for (int i = 0; i < g->nnodes; i++)
        if (kn_op_get(g->nodes[i].op)->category == KN_CAT_COLLECTIVE)
            return kn_error(KN_ERR_ARG, "ddp/zero: %%%d = %s: the graph already has collectives (one data-parallel pass runs once)", i,
                            kn_op_name(g->nodes[i].op));
    kn_slab_param *info = kn_calloc((size_t)count, sizeof *info);
    if (!info) return kn_error(KN_ERR_OOM, "ddp/zero: out of memory");
    s->p.count = count;
    s->p.info = info;
    int64_t n = 0; /* floats in the slab so far */
    for (int i = 0; i < count; i++) {
        const kn_type *t = &g->nodes[g->outputs[1 + i]].type;
        kn_slab_param *pi = &info[i];
        if (t->dtype != KN_DT_F32)
            return kn_error(KN_ERR_DTYPE, "ddp/zero: output %d (%%%d) is not an f32 gradient: the gradient slab is f32", 1 + i,
                            g->outputs[1 + i]);
        bool a_param = false; /* a gradient has its parameter's type (a forward graph's logits do not) */
        for (int k = 0; k < g->nnodes && !a_param; k++)
            a_param = g->nodes[k].op == KN_OP_PARAM && kn_type_equal(&g->nodes[k].type, t);
        if (!a_param)
            return kn_error(KN_ERR_ARG, "ddp/zero: output %d (%%%d) has the type of no param: a joint graph has the loss, "
                            "then a gradient per parameter", 1 + i, g->outputs[1 + i]);
        pi->numel = kn_type_numel(t);
        pi->offset = n;
        pi->decay = t->ndim >= 2;
        n += pi->numel;
    }
    return kn_dp_buckets(&s->p, bucket_bytes, &s->buckets, &s->nbuckets);
}

/* ZeRO-3: parameter i is the i-th param node (definition order), of its gradient's type;
 * per bucket and phase (the readers before the loss, the forward; after it, the backward)
 * a window, first reader first. */
static kn_status plan_gathers(const kn_graph *g, ddp_state *s) {
    int count = s->p.count, nb = s->nbuckets, np = 0;
    s->param_of = kn_malloc((size_t)g->nnodes * sizeof(int));
    s->win_of = kn_malloc((size_t)nb * 2 * sizeof(int));
    s->win_first = kn_malloc((size_t)nb * 2 * sizeof(int32_t));
    s->win_bucket = kn_malloc((size_t)nb * 2 * sizeof(int));
    s->win_start = kn_malloc((size_t)nb * 2 * sizeof(int32_t));
    s->win_buf = kn_malloc((size_t)nb * 2 * sizeof(int32_t));
    s->view = kn_malloc((size_t)count * 2 * sizeof(int32_t));
    int32_t *first = kn_malloc((size_t)nb * 2 * sizeof(int32_t));
    kn_status st = s->param_of && s->win_of && s->win_first && s->win_bucket && s->win_start && s->win_buf && s->view &&
                   first ? KN_OK : kn_error(KN_ERR_OOM, "zero3: out of memory");
    for (int i = 0; st == KN_OK && i < g->nnodes; i++) {
        s->param_of[i] = -1;
        if (g->nodes[i].op != KN_OP_PARAM) continue;
        if (np < count && !kn_type_equal(&g->nodes[i].type, &g->nodes[g->outputs[1 + np]].type)) {
            char a[96], b[96];
            st = kn_error(KN_ERR_ARG, "zero3: param %%%d \"%s\" is %s but gradient %d is %s: parameter i must be the "
                          "i-th param of the graph", i, g->nodes[i].attrs.name, kn_type_str(&g->nodes[i].type, a, sizeof a),
                          np, kn_type_str(&g->nodes[g->outputs[1 + np]].type, b, sizeof b));
        }
        s->param_of[i] = np++;
    }
    if (st == KN_OK && np != count)
        st = kn_error(KN_ERR_ARG, "zero3: %d params for %d gradients: each parameter is gathered into its slab place", np,
                      count);
    for (int i = 0; st == KN_OK && i < nb * 2; i++) first[i] = s->win_of[i] = -1;
    for (int i = 0; st == KN_OK && i < count * 2; i++) s->view[i] = -1;
    int32_t loss = g->outputs[0];
    for (int32_t v = 0; st == KN_OK && v < g->nnodes; v++)
        for (int k = 0; k < g->nodes[v].nin; k++) {
            int j = s->param_of[g->nodes[v].in[k]];
            int32_t *f = j >= 0 ? &first[2 * s->bucket_of[j] + (v > loss)] : NULL;
            if (f && *f < 0) *f = v;
        }
    /* the windows in the order of their first readers (a node's are in bucket order) */
    for (int32_t v = 0; st == KN_OK && v < g->nnodes; v++)
        for (int w = 0; w < nb * 2; w++) {
            if (first[w] != v) continue;
            s->win_of[w] = s->nwin;
            s->win_first[s->nwin] = v;
            s->win_bucket[s->nwin] = w / 2;
            s->win_start[s->nwin] = s->win_buf[s->nwin] = -1;
            s->nwin++;
        }
    kn_free(first);
    return st;
}

static kn_status emit_typed(kn_graph *ng, kn_op op, int32_t in, const kn_attrs *a, const kn_type *t, int32_t *id) {
    KN_TRY(emit(ng, op, 1, &in, a, id));
    ng->nodes[*id].type = *t;
    return KN_OK;
}

/* Window w's all_gather starts (its token: the graph's zero). */
static kn_status gather_start(kn_graph *ng, ddp_state *s, int w, int32_t zero, kn_pass_stats *st) {
    kn_attrs a = kn_attrs_default();
    a.start = s->buckets[s->win_bucket[w]].lo;
    a.stop = s->buckets[s->win_bucket[w]].hi;
    kn_type t = {KN_DT_F32, 1, {a.stop - a.start}};
    KN_TRY(emit_typed(ng, KN_OP_ALL_GATHER_START, zero, &a, &t, &s->win_start[w]));
    kn_pass_stats_fire(st, "all_gather_start", 1);
    return KN_OK;
}

/* Before old node v: the windows whose first reader it is are waited for, each followed by
 * the next window's start (the prefetch: it runs while the steps up to that window's first
 * reader compute); then v's operands that are parameters become views into their phase's
 * gathered buffer. */
static kn_status gather_for(const kn_graph *g, ddp_state *s, int32_t v, int32_t zero, kn_graph *ng, kn_node *n,
                            kn_pass_stats *st) {
    for (int w = 0; w < s->nwin; w++) {
        if (s->win_first[w] != v) continue;
        kn_attrs a = kn_attrs_default();
        a.start = s->buckets[s->win_bucket[w]].lo;
        a.stop = s->buckets[s->win_bucket[w]].hi;
        kn_type t = {KN_DT_F32, 1, {a.stop - a.start}};
        KN_TRY(emit_typed(ng, KN_OP_COMM_WAIT, s->win_start[w], &a, &t, &s->win_buf[w]));
        kn_pass_stats_fire(st, "comm_wait", 1);
        if (w + 1 < s->nwin && s->win_start[w + 1] < 0) KN_TRY(gather_start(ng, s, w + 1, zero, st));
    }
    int phase = v > g->outputs[0];
    for (int k = 0; k < n->nin; k++) {
        int j = s->param_of[g->nodes[v].in[k]];
        if (j < 0) continue;
        int32_t *view = &s->view[2 * j + phase];
        if (*view < 0) {
            const kn_slab_param *pi = &s->p.info[j];
            const kn_type *gt = &g->nodes[g->outputs[1 + j]].type; /* its gradient's: the parameter's */
            const kn_dp_bucket *b = &s->buckets[s->bucket_of[j]];
            int w = s->win_of[2 * s->bucket_of[j] + phase];
            KN_CHECK(w >= 0 && s->win_buf[w] >= 0); /* opened at its first reader, this one or an earlier */
            kn_attrs a = kn_attrs_default();
            a.axis = 0;
            a.start = pi->offset - b->lo;
            a.stop = a.start + pi->numel;
            a.step = 1;
            kn_type t = {KN_DT_F32, 1, {pi->numel}};
            KN_TRY(emit_typed(ng, KN_OP_SLICE, s->win_buf[w], &a, &t, view));
            a = kn_attrs_default();
            a.nshape = gt->ndim;
            memcpy(a.shape, gt->shape, sizeof gt->shape);
            if (gt->ndim != 1) KN_TRY(emit_typed(ng, KN_OP_RESHAPE, *view, &a, &g->nodes[g->nodes[v].in[k]].type, view));
        }
        n->in[k] = *view;
    }
    return KN_OK;
}

/* Build the rewritten graph into ng (see the file comment). */
static kn_status rebuild(const kn_graph *g, ddp_state *s, kn_op coll, bool gather, kn_graph *ng, kn_pass_stats *st) {
    int count = s->p.count, nb = s->nbuckets;
    s->bucket_of = kn_malloc((size_t)count * sizeof(int));
    s->next = kn_malloc((size_t)count * sizeof(int));
    s->first = kn_malloc((size_t)g->nnodes * sizeof(int));
    s->map = kn_malloc((size_t)g->nnodes * sizeof(int32_t));
    s->tok = kn_malloc((size_t)nb * sizeof(int32_t));
    s->start = kn_malloc((size_t)nb * sizeof(int32_t));
    s->left = kn_malloc((size_t)nb * sizeof(int));
    if (!s->bucket_of || !s->next || !s->first || !s->map || !s->tok || !s->start || !s->left)
        return kn_error(KN_ERR_OOM, "ddp/zero: out of memory");
    for (int b = 0; b < nb; b++) {
        s->tok[b] = s->start[b] = -1;
        s->left[b] = s->buckets[b].last_param - s->buckets[b].first_param + 1;
        for (int i = s->buckets[b].first_param; i <= s->buckets[b].last_param; i++) s->bucket_of[i] = b;
    }
    for (int i = 0; i < g->nnodes; i++) s->first[i] = -1;
    for (int i = count - 1; i >= 0; i--) {
        int32_t node = g->outputs[1 + i];
        s->next[i] = s->first[node];
        s->first[node] = i;
    }
    if (gather) KN_TRY(plan_gathers(g, s));
    int32_t zero = -1; /* the token the first store of every bucket (and every gather) reads */
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_node n = g->nodes[i];
        if (gather && s->param_of[i] >= 0) { /* a sharded parameter: read from its gathered bucket */
            s->map[i] = -1;
            continue;
        }
        if (gather && s->nwin > 0 && s->win_start[0] < 0 && n.op != KN_OP_INPUT && n.op != KN_OP_PARAM) {
            kn_attrs a = kn_attrs_default(); /* the first gather starts with the graph's first computing node */
            a.value = 0;
            KN_TRY(emit(ng, KN_OP_FULL, 0, NULL, &a, &zero));
            KN_TRY(gather_start(ng, s, 0, zero, st));
        }
        for (int k = 0; k < n.nin; k++) n.in[k] = s->map[n.in[k]];
        if (gather) KN_TRY(gather_for(g, s, i, zero, ng, &n, st));
        KN_TRY(kn_graph_add_node(ng, &n, &s->map[i]));
        for (int j = s->first[i]; j >= 0; j = s->next[j]) {
            int b = s->bucket_of[j];
            kn_attrs a = kn_attrs_default();
            if (zero < 0) {
                a.value = 0;
                KN_TRY(emit(ng, KN_OP_FULL, 0, NULL, &a, &zero));
            }
            int32_t ops[2] = {s->map[i], s->tok[b] >= 0 ? s->tok[b] : zero};
            a = kn_attrs_default();
            a.offset = s->p.info[j].offset;
            KN_TRY(emit(ng, KN_OP_GRAD_STORE, 2, ops, &a, &s->tok[b]));
            kn_pass_stats_fire(st, "grad_store", 1);
            if (--s->left[b] > 0) continue;
            a = kn_attrs_default();
            a.start = s->buckets[b].lo;
            a.stop = s->buckets[b].hi;
            KN_TRY(emit(ng, coll, 1, &s->tok[b], &a, &s->start[b]));
            kn_pass_stats_fire(st, kn_op_name(coll), 1);
        }
    }
    KN_TRY(kn_graph_add_output(ng, s->map[g->outputs[0]]));
    for (int b = 0; b < nb; b++) {
        KN_CHECK(s->start[b] >= 0); /* every parameter has an output, so every bucket started */
        kn_attrs a = kn_attrs_default();
        a.start = s->buckets[b].lo;
        a.stop = s->buckets[b].hi;
        int32_t w;
        KN_TRY(emit(ng, KN_OP_COMM_WAIT, 1, &s->start[b], &a, &w));
        KN_TRY(kn_graph_add_output(ng, w));
        kn_pass_stats_fire(st, "comm_wait", 1);
    }
    return KN_OK;
}

static kn_status data_parallel(kn_graph *g, kn_op coll, bool gather, kn_pass_stats *st) {
    double mb;
    KN_TRY(parse_mb(st && st->arg[0] ? st->arg : NULL, &mb));
    ddp_state s;
    memset(&s, 0, sizeof s);
    kn_graph *ng = NULL;
    kn_status rc = read_layout(g, (size_t)(mb * 1048576.0), &s);
    if (rc == KN_OK) rc = kn_graph_new(&ng);
    if (rc == KN_OK) rc = rebuild(g, &s, coll, gather, ng, st);
    state_free(&s);
    if (rc != KN_OK) {
        kn_graph_free(ng);
        return rc;
    }
    kn_graph tmp = *g; /* g takes ng's arrays; ng's shell frees g's old ones */
    *g = *ng;
    *ng = tmp;
    kn_graph_free(ng);
    return KN_OK;
}

kn_status kn_pass_ddp(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_ddp: NULL graph");
    return data_parallel(g, KN_OP_ALL_REDUCE_START, false, st);
}

kn_status kn_pass_zero(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_zero: NULL graph");
    return data_parallel(g, KN_OP_REDUCE_SCATTER_START, false, st);
}

kn_status kn_pass_zero3(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_zero3: NULL graph");
    return data_parallel(g, KN_OP_REDUCE_SCATTER_START, true, st);
}

kn_status kn_dp_overlap_room(const kn_graph *g, kn_overlap_room *out) {
    if (!g || !out || g->noutputs < 1) return kn_error(KN_ERR_ARG, "kn_dp_overlap_room: NULL argument or no loss");
    memset(out, 0, sizeof *out);
    int32_t loss = g->outputs[0];
    double total = 0, after = 0;
    for (int32_t i = loss + 1; i < g->nnodes; i++) total += kn_node_cost(g, i).flops;
    /* walk back: `after` is the FLOPs of the backward's nodes after node i */
    double sum = 0;
    out->least = 1;
    for (int32_t i = g->nnodes - 1; i > loss; i--) {
        kn_op op = g->nodes[i].op;
        if (op == KN_OP_ALL_REDUCE_START || op == KN_OP_REDUCE_SCATTER_START) {
            double share = total > 0 ? after / total : 0;
            out->starts++;
            sum += share;
            if (share < out->least) out->least = share;
            if (share > out->most) out->most = share;
        }
        after += kn_node_cost(g, i).flops;
    }
    if (out->starts == 0) out->least = 0;
    out->mean = out->starts ? sum / out->starts : 0;
    out->backward_flops = total;
    return KN_OK;
}
