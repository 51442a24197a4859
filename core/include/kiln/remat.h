/* kiln/remat.h — activation checkpointing: the remat pass and its policies, the min-cut
 * partitioner it keeps a cut with (core/passes/remat.c, mincut.c).
 *
 * Why a header of its own: kiln/passes.h is the pass table, the reports every pass fills
 * and the passes themselves; the remat pass's policies and the partitioner behind them are
 * a subject of their own (lesson 08), reached through the pass table ("remat:POLICY")
 * and --remat's check of its policy. Built on kiln/passes.h (a pass's kn_pass_stats). Lab 08's
 * kn_remat_selective (the cheap ops of the selective policy) and the live-bytes measure
 * (kn_passes_live_bytes: the figure remat lowers) stay in kiln/passes.h, beside the lab's
 * units and where its tests find them. */
#ifndef KILN_REMAT_H
#define KILN_REMAT_H

#include "kiln/passes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- activation checkpointing
 * (core/passes/remat.c, core/passes/mincut.c, core/passes/live.c)
 *
 * Rematerialization on the joint forward+backward graph (kiln/autograd.h). The forward is
 * what the first output (the loss) depends on (and what is computed before the loss from
 * those values alone: kn_graph_forward); everything else is the backward. The
 * backward reads forward values (the activations), which therefore stay alive from the
 * forward to their use in the backward: that is what fills a training step's memory. A
 * policy picks the forward values to keep; every other forward value the backward reads
 * is recomputed: its forward node (and what it needs that is not kept) is cloned into the
 * backward, just before the first backward node that reads it, and the backward reads the
 * clone. The originals then die at their last forward use. A clone runs the same kernel on
 * the same bits, so results do not change at all (on the CPU, bit for bit); a dropout
 * clone has its node's (seed, offset) and draws the same mask.
 *
 * Policies (the pass's argument, "remat:POLICY"):
 *   none       keep everything (the pass does nothing);
 *   selective  recompute only cheap ops: elementwise ops, views and norms (layernorm,
 *              normalize); matmuls, softmaxes, reductions, ... keep their outputs;
 *   full       per layer (the nodes' scope, stamped by the GPT builder): keep only what
 *              crosses from one layer to another (a layer's input) and what is outside
 *              every layer; recompute each layer's forward at the start of its backward;
 *   every:K    the same with blocks of K layers (full is every:1);
 *   mincut     AOTAutograd's min-cut partitioner: keep the set of least bytes from which
 *              the backward's reads can be recomputed, never recomputing a matmul or a
 *              random op (dropout);
 * selective is the same cut with only the cheap ops recomputable: a plain "recompute every
 * pointwise op" would recompute the residual stream, a chain of adds, back to the
 * embedding. Among cuts of least bytes both take the one nearest the backward (the least
 * recompute). Run remat after cse: cse would merge a clone back into its original.
 *
 * kn_remat_parse reads a policy (KN_ERR_ARG naming the policies otherwise);
 * kn_remat(g, policy, st) rewrites g in place; st (may be NULL) counts the rules
 * "recomputed" (clones made) and "kept" (forward values the backward still reads).
 * full and every:K need scopes: on a graph with a backward and no scoped forward node
 * they fail with KN_ERR_ARG. A graph without a backward is left as it is. */
typedef enum kn_remat_kind {
    KN_REMAT_NONE = 0,
    KN_REMAT_SELECTIVE,
    KN_REMAT_EVERY,      /* full is every:1 */
    KN_REMAT_MINCUT,
} kn_remat_kind;

typedef struct kn_remat_policy {
    kn_remat_kind kind;
    int every;           /* KN_REMAT_EVERY: layers per checkpointed block (>= 1) */
} kn_remat_policy;

kn_status kn_remat_parse(const char *text, kn_remat_policy *out);
kn_status kn_remat(kn_graph *g, kn_remat_policy policy, kn_pass_stats *st);
/* The pass of the table: kn_remat with the policy in st->arg. */
kn_status kn_pass_remat(kn_graph *g, kn_pass_stats *st);
/* The table's check of the argument: NULL or a bad policy is KN_ERR_ARG. */
kn_status kn_remat_check_arg(const char *arg);

/* Which forward values the backward may read without recomputing them: fwd[i] marks the
 * forward nodes (what output 0 depends on), need[i] those the backward reads; recompute
 * may clone a forward node unless banned[i]. keep[i] receives true for the values to
 * keep: a cut of least total bytes (kn_type bytes; a reshape, an alias, costs nothing and
 * is never kept for itself) such that every needed value is kept or recomputable from
 * kept values, inputs and params; of those cuts, the one nearest the backward. keep is
 * false outside the forward. A max-flow min-cut (Dinic's algorithm) on the forward nodes,
 * each split into an in and an out vertex joined by an edge of its bytes (core/passes/
 * mincut.c). */
kn_status kn_remat_mincut(const kn_graph *g, const bool *fwd, const bool *need, const bool *banned, bool *keep);

#ifdef __cplusplus
}
#endif

#endif /* KILN_REMAT_H */
