/* remat.c — activation checkpointing as a pass on the joint graph (kiln/remat.h).
 *
 * A training step's memory is mostly activations: forward values the backward reads,
 * alive from the forward until their use in the backward. Rematerialization trades
 * compute for that memory: keep fewer of them, and recompute the others in the backward
 * from what was kept. Because kiln differentiates by transforming graphs (kiln/autograd.h)
 * the trade is one more graph transform, and every policy is only a different answer to
 * one question: which forward values does the backward read as they are (kept)?
 *
 * The pass then does the same for every policy. It walks the joint graph in order; before
 * a backward node that reads a forward value that is not kept, it clones that value's
 * forward node, and the nodes that one needs that are neither kept nor cloned yet, in
 * their forward order, and points the backward node at the clone. Clones are made once,
 * at the first backward node that needs them, so the schedule (node order) recomputes a
 * layer right where its backward starts and frees the originals at their last forward
 * use. A clone is the same op with the same attributes on the same operands: the same
 * kernel computes the same bits, so losses and gradients are unchanged to the last bit on
 * the CPU. That includes dropout: its mask is Philox of the node's (seed, offset), not of
 * a generator's state, so a clone draws the same mask.
 *
 * The policies (full, every:K use the scopes the GPT builder stamps on each block's
 * nodes; selective and mincut the min-cut in core/passes/mincut.c) are described in
 * kiln/remat.h. Which ops selective may recompute is lab 08's unit kn_remat_selective
 * (labs/lab08-memory/recompute.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/passes.h"
#include "kiln/remat.h"

#define REMAT_POLICIES "none, selective, full, every:K (K >= 1 layers per block) or mincut"

kn_status kn_remat_parse(const char *text, kn_remat_policy *out) {
    if (!out) return kn_error(KN_ERR_ARG, "remat: NULL policy");
    if (!text) return kn_error(KN_ERR_ARG, "remat needs a policy: remat:POLICY with POLICY " REMAT_POLICIES);
    *out = (kn_remat_policy){KN_REMAT_NONE, 0};
    if (!strcmp(text, "none")) return KN_OK;
    if (!strcmp(text, "selective")) { out->kind = KN_REMAT_SELECTIVE; return KN_OK; }
    if (!strcmp(text, "mincut")) { out->kind = KN_REMAT_MINCUT; return KN_OK; }
    if (!strcmp(text, "full")) { *out = (kn_remat_policy){KN_REMAT_EVERY, 1}; return KN_OK; }
    if (!strncmp(text, "every:", 6)) {
        char *end = NULL;
        errno = 0;
        long k = strtol(text + 6, &end, 10);
        if (text[6] >= '0' && text[6] <= '9' && !*end && !errno && k >= 1 && k <= (1 << 20)) {
            *out = (kn_remat_policy){KN_REMAT_EVERY, (int)k};
            return KN_OK;
        }
        return kn_error(KN_ERR_ARG, "remat: every:K needs K, the layers per checkpointed block, an integer >= 1 "
                        "(got '%s')", text);
    }
    return kn_error(KN_ERR_ARG, "remat: unknown policy '%s' (policies: " REMAT_POLICIES ")", text);
}

kn_status kn_remat_check_arg(const char *arg) {
    kn_remat_policy p;
    return kn_remat_parse(arg, &p);
}

kn_status kn_pass_remat(kn_graph *g, kn_pass_stats *st) {
    kn_remat_policy p;
    KN_TRY(kn_remat_parse(st && st->arg[0] ? st->arg : NULL, &p));
    return kn_remat(g, p, st);
}

static bool is_free(kn_op op) { return op == KN_OP_INPUT || op == KN_OP_PARAM; }

/* full / every:K: keep what is outside every block and what a block hands to another
 * (its readers in the forward are in another block); recompute the rest. */
static kn_status keep_blocks(const kn_graph *g, int every, const bool *fwd, const bool *need, bool *keep) {
    bool scoped = false, needed = false;
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *nd = &g->nodes[i];
        if (!fwd[i]) continue;
        int32_t block = nd->scope < 0 ? -1 : nd->scope / every;
        keep[i] = is_free(nd->op) || block < 0;
        scoped |= block >= 0 && !is_free(nd->op);
        needed |= need[i];
        for (int k = 0; k < nd->nin; k++) {
            const kn_node *src = &g->nodes[nd->in[k]];
            if ((src->scope < 0 ? -1 : src->scope / every) != block) keep[nd->in[k]] = true;
        }
    }
    for (int i = 0; i < g->noutputs; i++) keep[g->outputs[i]] = true;
    if (needed && !scoped)
        return kn_error(KN_ERR_ARG, "remat: policy %s needs the layers of the forward, and no forward node has a "
                        "scope (the GPT builder stamps them, kn_builder_set_scope; a parsed graph has none): use "
                        "selective or mincut", every == 1 ? "full" : "every:K");
    return KN_OK;
}

/* The pass's working arrays, one entry per node of g: fwd (in the forward), need (read by
 * the backward), keep (the policy's answer), banned (never recomputed: the cut's input),
 * newid and clone (the node's copy and its clone in the rebuilt graph, -1 for none), and
 * the scratch of emit_cone. */
typedef struct remat_plan {
    bool *fwd, *need, *keep, *banned;
    int32_t *newid, *clone, *stack, *cone;
    bool *queued;
} remat_plan;

static void plan_free(remat_plan *p) {
    kn_free(p->fwd); kn_free(p->need); kn_free(p->keep); kn_free(p->banned);
    kn_free(p->newid); kn_free(p->clone); kn_free(p->stack); kn_free(p->cone); kn_free(p->queued);
}

static kn_status plan_init(remat_plan *p, const kn_graph *g) {
    memset(p, 0, sizeof *p);
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    p->fwd = kn_calloc(n, sizeof *p->fwd);
    p->need = kn_calloc(n, sizeof *p->need);
    p->keep = kn_calloc(n, sizeof *p->keep);
    p->banned = kn_calloc(n, sizeof *p->banned);
    p->queued = kn_calloc(n, sizeof *p->queued);
    p->newid = kn_malloc(n * sizeof *p->newid);
    p->clone = kn_malloc(n * sizeof *p->clone);
    p->stack = kn_malloc(n * sizeof *p->stack);
    p->cone = kn_malloc(n * sizeof *p->cone);
    if (!p->fwd || !p->need || !p->keep || !p->banned || !p->queued || !p->newid || !p->clone || !p->stack ||
        !p->cone) {
        plan_free(p);
        return kn_error(KN_ERR_OOM, "remat: out of memory for %d nodes", g->nnodes);
    }
    for (int i = 0; i < g->nnodes; i++) p->clone[i] = -1;
    kn_graph_forward(g, p->fwd); /* what the loss depends on (kiln/passes.h) */
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; !p->fwd[i] && k < g->nodes[i].nin; k++) {
            int32_t v = g->nodes[i].in[k];
            p->need[v] |= p->fwd[v] && !is_free(g->nodes[v].op);
        }
    return KN_OK;
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The id in out that a node reading v reads: the clone of a recomputed forward value (in
 * the backward), else v's own copy. */
static int32_t operand(const remat_plan *p, int32_t v, bool backward) {
    return backward && p->fwd[v] && !p->keep[v] ? p->clone[v] : p->newid[v];
}

/* Clone v and what it needs that is neither kept nor cloned, in forward order. */
static kn_status emit_cone(remat_plan *p, const kn_graph *g, kn_graph *out, int32_t v, kn_pass_stats *st) {
    int top = 0, nc = 0;
    p->stack[top++] = v;
    p->queued[v] = true;
    while (top) {
        int32_t c = p->stack[--top];
        p->cone[nc++] = c;
        for (int k = 0; k < g->nodes[c].nin; k++) {
            int32_t u = g->nodes[c].in[k];
            if (p->fwd[u] && !p->keep[u] && p->clone[u] < 0 && !p->queued[u]) {
                p->queued[u] = true;
                p->stack[top++] = u;
            }
        }
    }
    qsort(p->cone, (size_t)nc, sizeof *p->cone, cmp_id);
    for (int j = 0; j < nc; j++) {
        kn_node nd = g->nodes[p->cone[j]];
        for (int k = 0; k < nd.nin; k++) nd.in[k] = operand(p, nd.in[k], true);
        KN_TRY(kn_graph_add_node(out, &nd, &p->clone[p->cone[j]]));
    }
    kn_pass_stats_fire(st, "recomputed", nc);
    return KN_OK;
}

/* Rebuild g with the clones in front of the backward nodes that read them. */
static kn_status rebuild(remat_plan *p, kn_graph *g, kn_pass_stats *st) {
    kn_graph *out;
    KN_TRY(kn_graph_new(&out));
    kn_status s = KN_OK;
    for (int i = 0; s == KN_OK && i < g->nnodes; i++) {
        kn_node nd = g->nodes[i];
        bool backward = !p->fwd[i];
        for (int k = 0; backward && s == KN_OK && k < nd.nin; k++) {
            int32_t v = nd.in[k];
            if (p->fwd[v] && !p->keep[v] && p->clone[v] < 0) s = emit_cone(p, g, out, v, st);
        }
        for (int k = 0; k < nd.nin; k++) nd.in[k] = operand(p, nd.in[k], backward);
        if (s == KN_OK) s = kn_graph_add_node(out, &nd, &p->newid[i]);
    }
    for (int i = 0; s == KN_OK && i < g->noutputs; i++) s = kn_graph_add_output(out, p->newid[g->outputs[i]]);
    if (s == KN_OK) { /* swap the new arrays into g; free the old ones with out's shell */
        kn_graph tmp = *g;
        *g = *out;
        *out = tmp;
    }
    kn_graph_free(out);
    return s;
}

kn_status kn_remat(kn_graph *g, kn_remat_policy policy, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "remat: NULL graph");
    if (policy.kind == KN_REMAT_EVERY && policy.every < 1)
        return kn_error(KN_ERR_ARG, "remat: every:K needs K >= 1 (got %d)", policy.every);
    if (policy.kind == KN_REMAT_NONE) return KN_OK;
    remat_plan p;
    KN_TRY(plan_init(&p, g));
    kn_status s = KN_OK;
    if (policy.kind == KN_REMAT_EVERY) {
        s = keep_blocks(g, policy.every, p.fwd, p.need, p.keep);
    } else if (policy.kind == KN_REMAT_SELECTIVE) { /* the cheap ops: lab 08's unit says which */
        s = kn_remat_selective(g, p.banned);
        for (int i = 0; s == KN_OK && i < g->nnodes; i++) p.banned[i] = !p.banned[i];
        if (s == KN_OK) s = kn_remat_mincut(g, p.fwd, p.need, p.banned, p.keep);
    } else {
        for (int i = 0; i < g->nnodes; i++) {
            kn_op op = g->nodes[i].op;
            p.banned[i] = kn_op_get(op)->category == KN_CAT_MATMUL || kn_op_is_random(op) ||
                          op == KN_OP_FLASH_ATTN; /* matrix products inside */
        }
        s = kn_remat_mincut(g, p.fwd, p.need, p.banned, p.keep);
    }
    int64_t kept = 0;
    for (int i = 0; i < g->nnodes; i++) kept += p.need[i] && p.keep[i];
    kn_pass_stats_fire(st, "kept", kept);
    if (s == KN_OK) s = rebuild(&p, g, st);
    plan_free(&p);
    return s;
}
