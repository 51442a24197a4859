/* plan.c — a COMPILED program's memory plan: every value its steps make gets an offset in
 * one arena (kn_program_plan_memory, compile.c's plan stage; program.c then places values
 * there as they are made). It runs after lowering and before rendering: the kernels' IR says
 * what each step reads and writes, and the plan tells the renderer which of a kernel's
 * buffers it made alias (kn_kbuf's aliased). */
#include <stdint.h>
#include <string.h>

#include "kiln/codegen.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "program/program_impl.h"

/* ---- the memory plan (COMPILED programs)
 *
 * Every value a step makes lives from that step to the last step that reads it (or reads
 * a reshape of it: a reshape aliases its operand's storage, so the two are one buffer).
 * Buffers whose lifetimes do not overlap may share bytes: the planner gives each an offset
 * in one arena, largest first, at the lowest offset where it overlaps no buffer that is
 * live at the same time (TFLite's greedy-by-size arena planner; ggml-alloc does the same
 * idea while it walks the graph). Inputs, parameters and outputs keep their own memory:
 * outputs are read after the run. The lifetimes and the offsets are lab 08's units
 * (kn_mem_liveness, kn_mem_assign_offsets; labs/lab08-memory/).
 *
 * In place: an elementwise kernel (no reduction) may write a value over one it reads when
 * that operand's storage dies at this very step, has the same size, and every load of it
 * indexes it exactly as the store indexes the result (same dtype, offset and strides: the
 * kernel reads each element before it writes the same index, and the renderer emits every
 * load of an element before its stores; the plan marks the store and the loads of the
 * operand it overwrites aliased, and the C renderer drops `restrict` from those). Never for a broadcast or a transposed read, which would read an
 * element after it was overwritten. The two values then form one buffer, from the first
 * one's step to the last one's last reader; chains (x -> exp -> mul -> ...) form one
 * buffer. Only on the C target: the CUDA dialect keeps its restrict pointers.
 *
 * A library step may do the same over the operand kn_op_inplace_operand names (the op's
 * CPU and CUDA kernels are written, and tested, for out == that operand: cross_entropy_bwd
 * writes the logits' gradient over the logits, a GPT's largest pair of values), on every
 * target, when that operand's storage dies at the step, has the result's dtype and element
 * count, and is the storage itself or a reshape of it (a slice may start past its bytes),
 * and no other operand of the step reads it.
 *
 * Greedy packing is a heuristic, and a longer buffer can pack worse than its parts: when
 * the arena with in place comes out larger than without, the plan without is kept.
 *
 * The report: the sum of the buffers' sizes (what one allocation per buffer, all live,
 * would need), the arena's size (the plan), the arena planned without in-place, and the
 * lower bound no plan can beat: the most bytes live at one step. */
size_t kn_program_plan_size(const kn_type *t) {
    size_t b = (size_t)kn_type_numel(t) * kn_dtype_size(t->dtype);
    return (b + 63) & ~(size_t)63;
}

/* The steps as the liveness unit sees them: what each writes and reads, a reshape's
 * storage named by its root (the reshape step itself writes nothing of its own). */
static kn_status mem_steps(const kn_program *p, const int32_t *root, kn_mem_step *ms, int32_t *ids) {
    const kn_graph *g = p->g;
    size_t at = 0;
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        kn_mem_step m = {ids + at, 0, NULL, 0};
        if (sp->kernel < 0) {
            const kn_node *n = &g->nodes[sp->node];
            if (!(n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type))) { ids[at++] = sp->node; m.ndefs = 1; }
            m.uses = ids + at;
            for (int k = 0; k < n->nin; k++) ids[at++] = root[n->in[k]];
            m.nuses = n->nin;
        } else {
            const kn_kernel *k = &p->kernels[sp->kernel].ir;
            for (int b = 0; b < k->nbufs; b++)
                if (k->bufs[b].store) { ids[at++] = k->bufs[b].value; m.ndefs++; }
            m.uses = ids + at;
            for (int b = 0; b < k->nbufs; b++)
                if (!k->bufs[b].store) { ids[at++] = root[k->bufs[b].value]; m.nuses++; }
        }
        ms[s] = m;
    }
    return KN_OK;
}

/* The value step s's kernel may write in place over its stored value v (see above), or -1. */
static int32_t inplace_over(const kn_program *p, const kn_kernel *k, int bs, int s, const int32_t *root,
                            const size_t *sz, const bool *taken) {
    int32_t v = k->bufs[bs].value;
    for (int bl = 0; bl < k->nbufs; bl++) {
        int32_t r = k->bufs[bl].store ? -1 : root[k->bufs[bl].value];
        if (r < 0 || sz[r] == 0 || taken[r] || p->mem_last[r] != s || sz[r] != sz[v] ||
            !kn_kernel_same_map(k, bs, bl))
            continue;
        bool every_load_alike = true; /* the same storage read another way: a transpose of it */
        for (int b = 0; b < k->nbufs; b++)
            every_load_alike &= k->bufs[b].store || root[k->bufs[b].value] != r || kn_kernel_same_map(k, bs, b);
        if (every_load_alike) return r;
    }
    return -1;
}

/* The stored value library step s may write its result over (kn_op_inplace_operand; see
 * above), or -1. */
static int32_t library_inplace_over(const kn_program *p, int s, const int32_t *root, const size_t *sz,
                                    const bool *taken) {
    const kn_graph *g = p->g;
    const kn_node *n = &g->nodes[p->steps[s].node];
    int k = kn_op_inplace_operand(n->op);
    if (k < 0 || k >= n->nin || sz[p->steps[s].node] == 0) return -1;
    int32_t x = n->in[k], r = root[x];
    const kn_type *xt = &g->nodes[x].type;
    if (sz[r] == 0 || taken[r] || p->mem_last[r] != s || sz[r] != sz[p->steps[s].node] ||
        xt->dtype != n->type.dtype || kn_type_numel(xt) != kn_type_numel(&n->type))
        return -1;
    for (int32_t a = x; a != r; a = g->nodes[a].in[0]) /* the bytes from the storage's start */
        if (g->nodes[a].op != KN_OP_RESHAPE) return -1;
    for (int j = 0; j < n->nin; j++)
        if (j != k && root[n->in[j]] == r) return -1;
    return r;
}

/* The plan's facts for the renderer: in each kernel, a store the plan writes over an
 * operand (mem_from) and every load of that operand's storage share bytes, so none of them
 * may be a `restrict` pointer. Every other buffer of a kernel has bytes of its own during
 * the step (the plan gives values live at the same step disjoint bytes), so it keeps it. */
static void mark_aliased(kn_program *p, const int32_t *root) {
    for (int s = 0; s < p->nsteps; s++) {
        if (p->steps[s].kernel < 0) continue;
        kn_kernel *k = &p->kernels[p->steps[s].kernel].ir;
        for (int b = 0; b < k->nbufs; b++) {
            int32_t r = k->bufs[b].store ? p->mem_from[k->bufs[b].value] : -1;
            if (r < 0) continue;
            k->bufs[b].aliased = true;
            for (int l = 0; l < k->nbufs; l++)
                if (!k->bufs[l].store && root[k->bufs[l].value] == r) k->bufs[l].aliased = true;
        }
    }
}

kn_status kn_program_plan_memory(kn_program *p, bool share) {
    const kn_graph *g = p->g;
    int nn = g->nnodes;
    size_t nids = 0;
    for (int s = 0; s < p->nsteps; s++)
        nids += p->steps[s].kernel < 0 ? (size_t)g->nodes[p->steps[s].node].nin + 1
                                       : (size_t)p->kernels[p->steps[s].kernel].ir.nbufs;
    p->mem_off = kn_malloc(sizeof *p->mem_off * ((size_t)nn + 1));
    p->mem_def = kn_malloc(sizeof *p->mem_def * ((size_t)nn + 1));
    p->mem_last = kn_malloc(sizeof *p->mem_last * ((size_t)nn + 1));
    p->mem_from = kn_malloc(sizeof *p->mem_from * ((size_t)nn + 1));
    int32_t *root = kn_malloc(sizeof *root * ((size_t)nn + 1)), *group = kn_malloc(sizeof *group * ((size_t)nn + 1));
    int32_t *ids = kn_malloc(sizeof *ids * (nids + 1));
    kn_mem_step *ms = kn_malloc(sizeof *ms * ((size_t)p->nsteps + 1));
    kn_mem_buffer *bufs = kn_malloc(sizeof *bufs * ((size_t)nn + 1)), *own = kn_malloc(sizeof *own * ((size_t)nn + 1));
    size_t *sz = kn_calloc((size_t)nn + 1, sizeof *sz), *offs = kn_malloc(sizeof *offs * ((size_t)nn + 1));
    double *delta = kn_calloc((size_t)p->nsteps + 1, sizeof *delta);
    bool *bad = kn_calloc((size_t)nn + 1, sizeof *bad), *taken = kn_calloc((size_t)nn + 1, sizeof *taken);
    kn_status st = KN_OK;
    if (!p->mem_off || !p->mem_def || !p->mem_last || !p->mem_from || !root || !group || !ids || !ms || !bufs ||
        !own || !sz || !offs || !delta || !bad || !taken)
        st = kn_error(KN_ERR_OOM, "kn_program_compile: out of memory for the memory plan");
    for (int i = 0; st == KN_OK && i < nn; i++) {
        p->mem_off[i] = -1;
        p->mem_from[i] = -1;
        group[i] = -1;
        const kn_node *n = &g->nodes[i];
        root[i] = n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type) ? root[n->in[0]] : i;
    }
    if (st == KN_OK) st = mem_steps(p, root, ms, ids);
    if (st == KN_OK) st = kn_mem_liveness(ms, p->nsteps, nn, p->mem_def, p->mem_last);
    for (int s = 0; st == KN_OK && s < p->nsteps; s++) { /* a host step of a GPU program (a `full`) makes */
        const kn_program_step *sp = &p->steps[s];      /* host memory: not the arena's */
        if (sp->kernel < 0 && p->target == KN_TARGET_CUDA && sp->be->type == KN_DEVICE_CPU) bad[root[sp->node]] = true;
    }
    for (int i = 0; st == KN_OK && i < nn; i++) {
        const kn_node *n = &g->nodes[i];
        if (p->is_output[i]) bad[root[i]] = true;
        if (root[i] == i && n->op != KN_OP_INPUT && n->op != KN_OP_PARAM)
            sz[i] = kn_program_plan_size(&n->type);
    }
    for (int i = 0; st == KN_OK && i < nn; i++) /* planned: made by a step, not an output, not empty */
        if (bad[i] || p->mem_def[i] < 0) sz[i] = 0;
    /* in place: a value joins the group of the operand it overwrites */
    for (int s = 0; st == KN_OK && share && p->target == KN_TARGET_C && s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        const kn_kernel *k = sp->kernel >= 0 ? &p->kernels[sp->kernel].ir : NULL;
        for (int b = 0; k && !k->reduces && b < k->nbufs; b++) {
            int32_t v = k->bufs[b].value, r;
            if (!k->bufs[b].store || sz[v] == 0 || (r = inplace_over(p, k, b, s, root, sz, taken)) < 0) continue;
            taken[r] = true;
            p->mem_from[v] = r;
            p->stats.mem_inplace++;
            p->stats.mem_inplace_bytes += (double)sz[v];
        }
    }
    for (int s = 0; st == KN_OK && share && s < p->nsteps; s++) { /* library steps, on every target */
        int32_t v = p->steps[s].node, r;
        if (p->steps[s].kernel >= 0 || (r = library_inplace_over(p, s, root, sz, taken)) < 0) continue;
        taken[r] = true;
        p->mem_from[v] = r;
        p->stats.mem_inplace++;
        p->stats.mem_inplace_bytes += (double)sz[v];
    }
    int nbuf = 0, nown = 0;
    for (int i = 0; st == KN_OK && i < nn; i++) { /* buffers: one per chain of in-place values, at its head */
        if (sz[i] == 0) continue;
        own[nown++] = (kn_mem_buffer){sz[i], p->mem_def[i], p->mem_last[i]};
        p->stats.mem_sum += (double)sz[i];
        if (p->mem_from[i] < 0) {
            group[i] = nbuf;
            bufs[nbuf++] = (kn_mem_buffer){sz[i], p->mem_def[i], p->mem_last[i]};
        }
    }
    for (int i = 0; st == KN_OK && i < nn; i++) { /* the rest join their head (made at an earlier step, any id) */
        if (sz[i] == 0 || p->mem_from[i] < 0) continue;
        int32_t h = p->mem_from[i];
        while (p->mem_from[h] >= 0) h = p->mem_from[h];
        group[i] = group[h];
        if (p->mem_last[i] > bufs[group[i]].last) bufs[group[i]].last = p->mem_last[i];
    }
    size_t top = 0, top_own = 0;
    if (st == KN_OK && !share) { /* no plan (the ablation's row): every buffer its own bytes, one after another */
        for (int b = 0; b < nbuf; b++) {
            offs[b] = top;
            top += (bufs[b].size + 255) & ~(size_t)255;
        }
        top_own = top;
    }
    if (st == KN_OK && share) st = kn_mem_assign_offsets(own, nown, offs, &top_own);
    if (st == KN_OK && share) st = kn_mem_assign_offsets(bufs, nbuf, offs, &top);
    if (st == KN_OK && top > top_own) {
        /* greedy by size is a heuristic: a chain made one longer buffer can pack worse than
         * its values apart (the small GPT's step keeping its loss, opts.keep_loss: 1.62 MB
         * against 1.59). Then the plan without in place: in place never costs. */
        nbuf = 0;
        for (int i = 0; i < nn; i++) {
            if (sz[i] == 0) continue;
            p->mem_from[i] = -1;
            group[i] = nbuf;
            bufs[nbuf] = own[nbuf];
            nbuf++;
        }
        p->stats.mem_inplace = 0;
        p->stats.mem_inplace_bytes = 0;
        st = kn_mem_assign_offsets(bufs, nbuf, offs, &top);
    }
    for (int i = 0; st == KN_OK && i < nn; i++)
        if (group[i] >= 0) p->mem_off[i] = (int64_t)offs[group[i]];
    if (st == KN_OK) mark_aliased(p, root);
    for (int b = 0; st == KN_OK && b < nbuf; b++) { /* the lower bound: the most bytes live at once */
        delta[bufs[b].first] += (double)bufs[b].size;
        delta[bufs[b].last + 1] -= (double)bufs[b].size;
    }
    double live = 0;
    for (int s = 0; st == KN_OK && s < p->nsteps; s++) {
        live += delta[s];
        if (live > p->stats.mem_lower) p->stats.mem_lower = live;
    }
    p->stats.mem_planned = (double)top;
    p->stats.mem_planned_separate = (double)top_own;
    if (st == KN_OK && top > 0 && p->target == KN_TARGET_CUDA) {
        /* GPU memory is scarce: the arena is taken from the device's caching allocator when a
         * run starts and given back when it ends (a trainer's step and eval programs then do
         * not hold two arenas), except under a CUDA graph, which keeps its addresses */
        p->arena_bytes = top;
    } else if (st == KN_OK && top > 0) {
        p->arena_raw = kn_malloc(top + 64);
        if (!p->arena_raw) st = kn_error(KN_ERR_OOM, "kn_program_compile: cannot allocate the %zu-byte arena", top);
        else p->arena = p->arena_raw + ((64 - ((uintptr_t)p->arena_raw & 63)) & 63);
    }
    kn_free(root); kn_free(group); kn_free(ids); kn_free(ms); kn_free(bufs); kn_free(own);
    kn_free(sz); kn_free(offs); kn_free(delta); kn_free(bad); kn_free(taken);
    return st;
}

/* ---- the loss and its gradient in one pass (kn_program_pair_losses)
 *
 * A training step's joint graph has L = cross_entropy(x, t) in the forward and, much later,
 * D = cross_entropy_bwd(dl, x, t) in the backward, where dl, the loss's gradient, is known
 * before the forward runs (autograd's seed: 1, or the loss scale). As two library steps
 * they read the logits x three times in all (L's pass, D's statistics and D's writing
 * pass): at B = 8, T = 1024 and GPT-2's vocabulary, 824 MB of bf16 logits each time. The
 * backends' cross_entropy_fused (kiln/device.h) makes both from one pass (each row's
 * statistics, then its gradient from cache, written over the logits where the plan put D
 * in place), so the program runs the pair as one call at D's step, and L's step does
 * nothing. The graph keeps its two nodes (the IR has one result per node): the interpreter
 * and a NODES program still run them apart, to the same bits.
 *
 * Paired when: both are library steps of one backend that has the call; D's logits and
 * targets are L's operands; and no step after L up to D reads L (moved to D's step, L's
 * value must not be read before it is made). L's planned bytes are its own from L's step
 * on, so making it later is safe; D is made at its own step as planned. Only for a
 * COMPILED program (its plan). p->ce_pair per step: D's step holds L's step, L's step
 * -2, every other step -1. */
static int32_t alias_root(const kn_graph *g, int32_t v) {
    while (g->nodes[v].nin == 1 && kn_ir_aliases(&g->nodes[v], &g->nodes[g->nodes[v].in[0]].type)) v = g->nodes[v].in[0];
    return v;
}

static bool step_reads(const kn_program *p, int s, int32_t v) {
    const kn_program_step *sp = &p->steps[s];
    const kn_graph *g = p->g;
    if (sp->kernel < 0) {
        const kn_node *n = &g->nodes[sp->node];
        for (int k = 0; k < n->nin; k++)
            if (alias_root(g, n->in[k]) == v) return true;
        return false;
    }
    const kn_kernel *k = &p->kernels[sp->kernel].ir;
    for (int b = 0; b < k->nbufs; b++)
        if (!k->bufs[b].store && alias_root(g, k->bufs[b].value) == v) return true;
    return false;
}

kn_status kn_program_pair_losses(kn_program *p) {
    const kn_graph *g = p->g;
    p->stats.ce_fused = 0;
    p->ce_pair = kn_malloc(sizeof *p->ce_pair * ((size_t)p->nsteps + 1));
    if (!p->ce_pair) return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory for the loss pairs");
    for (int s = 0; s < p->nsteps; s++) p->ce_pair[s] = -1;
    for (int sd = 0; sd < p->nsteps; sd++) {
        const kn_program_step *d = &p->steps[sd];
        const kn_node *nd = &g->nodes[d->node];
        if (d->kernel >= 0 || nd->op != KN_OP_CROSS_ENTROPY_BWD || !d->be || !d->be->cross_entropy_fused) continue;
        int sl = -1;
        for (int s = sd - 1; s >= 0 && sl < 0; s--) {
            const kn_program_step *l = &p->steps[s];
            const kn_node *nl = &g->nodes[l->node];
            if (l->kernel < 0 && nl->op == KN_OP_CROSS_ENTROPY && l->be == d->be && l->index == d->index &&
                nl->in[0] == nd->in[1] && nl->in[1] == nd->in[2] && p->ce_pair[s] == -1)
                sl = s;
        }
        bool read = false;
        for (int s = sl + 1; sl >= 0 && s <= sd && !read; s++) read = step_reads(p, s, p->steps[sl].node);
        if (sl < 0 || read) continue;
        p->ce_pair[sd] = sl;
        p->ce_pair[sl] = -2;
        p->stats.ce_fused++;
    }
    return KN_OK;
}
