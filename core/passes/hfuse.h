/* hfuse.h — what the two halves of the `hfuse` pass share: the plan that matching
 * (hfuse_match.c) fills with groups of sibling products and sums, and rebuilding
 * (hfuse.c) turns into the new graph. Private to core/passes/hfuse*.c; the pass itself
 * is declared in kiln/passes.h and described in hfuse.c. */
#ifndef KN_PASSES_HFUSE_H
#define KN_PASSES_HFUSE_H

#include "ir/ir_impl.h"
#include "kiln/passes.h"

enum { HF_MAX = 8, HF_LEAVES = 16 }; /* parts one group merges; leaves of a sum looked at */

typedef enum hf_kind { HF_FWD, HF_DGRAD, HF_WGRAD, HF_CAT } hf_kind;
/* What an old node becomes: copied, dropped, a column slice of the merged product (a
 * forward part), or the merged sum (the root of a sum). */
typedef enum hf_role { R_KEEP = 0, R_DROP, R_SLICE, R_ROOT } hf_role;

typedef struct hf_group {
    hf_kind kind;
    int k;                 /* parts */
    int32_t part[HF_MAX];  /* FWD: the products; DGRAD: the products; WGRAD, CAT: the slice_grads */
    int32_t opnd[HF_MAX];  /* DGRAD, WGRAD: g_i; CAT: what the slice_grad scatters */
    int64_t start[HF_MAX], stop[HF_MAX];
    int32_t a;             /* FWD, WGRAD: the shared operand */
    int32_t w;             /* FWD, DGRAD: the weight whose columns the slices tile */
    int cast;              /* FWD, DGRAD: the slices' cast dtype; WGRAD: the products'; -1: none */
    int axis;              /* CAT: the axis the slice_grads tile */
    kn_attrs mm;           /* the merged product's ta, tb */
    int32_t at;            /* FWD: the first product (the merged one goes there); else the sum's root */
    int32_t rest[HF_LEAVES];
    int nrest;             /* the sum's other leaves */
    bool colsum;           /* CAT: the parts are column sums of the g_i, now in opnd (column_sums()) */
    int32_t src;           /* the stacked value the g_i are heads of (stacked()); -1 */
    int nperm;             /* its permutation that gives their concat, reshaped */
    int64_t perm[KN_MAX_DIMS];
    int32_t z;             /* FWD: the merged product in the new graph */
} hf_group;

typedef struct hf_memo {   /* a node emitted once and shared (cast of W, concat of the g_i) */
    kn_op op;
    int nin;
    int32_t in[2];
    kn_attrs attrs;
    int32_t id;
} hf_memo;

typedef struct hf_plan {
    const kn_graph *g;
    int32_t *uses;
    int32_t *reader;       /* the only reader of a value read once and not an output; -1 */
    int32_t *who;          /* group of a member; -1 */
    uint8_t *role;
    bool *live;            /* kept in the new graph (mark_live) */
    hf_group *grp;
    int ngrp, cap;
    hf_memo *memo;
    int nmemo, memocap;
} hf_plan;

/* Matching (hfuse_match.c), on p->g with p->uses, p->reader and p->who set (who all -1):
 * each appends the groups it finds to p->grp (at most p->cap), marks their members in
 * p->who and p->role, and leaves every node of another group alone. Forward products
 * first, then the sums (input gradients, weight gradients, sums of slice_grads). */
void hf_match_forward(hf_plan *p);
void hf_match_sums(hf_plan *p);

#endif
