/* fuse_rules.c — lab 05 unit: the fusion decision (kn_fuse_refusal, contract in
 * kiln/schedule.h).
 *
 * The scheduler (core/schedule/fuse.c) walks the graph in order and, for each node it could
 * put in a generated kernel, asks this function about the group of each operand (newest
 * first), then about the newest open group over the same space (a horizontal join). Your
 * answer decides the schedule: NULL means "join", with the level the node gets in the
 * kernel; a string is the reason it may not, and the schedule's log prints it, so make it
 * the one the contract names.
 *
 * Levels. A fused kernel loops over a space S (the group's shape): an outer loop over the
 * rows and, when the group reduces, an inner loop over the reduced axes. A full value
 * varies over all of S; an outer value is one per row (a reduction's result, or an op on
 * such values). Outer values are stored with the reduced axes kept as 1 (keepdim) or
 * dropped; both forms are "S without the reduced axes".
 *
 * Why each rule: a sealed group already runs where a node outside reads it, so it cannot
 * grow past that reader; a reduction over other axes would need another loop nest; an
 * operand of the group is in registers at its own shape only (the kernel cannot gather
 * another element of it); a view of a member would be read from memory that the kernel
 * has not written yet; an operand computed from the group by an outside node would need
 * the group to run both before and after that node (a cycle). */
#include "kiln/schedule.h"

/* BEGIN SOLUTION */
static bool same_shape(int nd, const int64_t *a, int nd2, const int64_t *b) {
    if (nd != nd2) return false;
    for (int k = 0; k < nd; k++)
        if (a[k] != b[k]) return false;
    return true;
}

/* Is shape (nd axes) S without the reduced axes, keepdim (1 there) or dropped? */
static bool outer_shape(const kn_fuse_query *q, int nd, const int64_t *shape) {
    if (nd == q->ndim) {
        for (int k = 0; k < nd; k++)
            if (shape[k] != ((q->inner >> k) & 1u ? 1 : q->shape[k])) return false;
        return true;
    }
    int j = 0;
    for (int k = 0; k < q->ndim; k++) {
        if ((q->inner >> k) & 1u) continue;
        if (j >= nd || shape[j] != q->shape[k]) return false;
        j++;
    }
    return j == nd;
}
/* END SOLUTION */

const char *kn_fuse_refusal(const kn_fuse_query *q, int *level) {
    if (!q || !level) return "no query";
    /* BEGIN SOLUTION */
    if (!q->fused) return "a library step";
    if (q->sealed) return "the group is sealed (a node outside it already reads it)";
    if (q->size >= KN_FUSE_MAX) return "the group is full (KN_FUSE_MAX nodes)";
    int lv;
    if (q->reduction) {
        const kn_fuse_operand *a = &q->in[0];
        if (a->in_group ? a->level != KN_LEVEL_FULL : !q->horizontal) return "a reduction of a value from outside the group";
        if (q->reduces && q->mask != q->inner) return "a reduction over other axes than the group's";
        if (!q->reduces && !same_shape(a->type->ndim, a->type->shape, q->ndim, q->shape))
            return "a reduction of a value of another shape";
        lv = KN_LEVEL_OUTER;
    } else if (same_shape(q->type->ndim, q->type->shape, q->ndim, q->shape)) {
        lv = KN_LEVEL_FULL;
    } else if (q->reduces && outer_shape(q, q->type->ndim, q->type->shape)) {
        lv = KN_LEVEL_OUTER;
    } else {
        return "its shape is neither the group's space nor the space without the reduced axes";
    }
    if (q->op == KN_OP_CAUSAL_FILL && lv != KN_LEVEL_FULL) return "causal_fill of a reduced value";
    for (int k = 0; k < q->nin; k++) {
        const kn_fuse_operand *a = &q->in[k];
        if (a->in_group) {
            if (q->reduction) continue;
            if (same_shape(a->type->ndim, a->type->shape, q->type->ndim, q->type->shape)) {
                if (a->level != lv) return "an operand of the group at another level";
                continue;
            }
            if (lv == KN_LEVEL_FULL && a->level == KN_LEVEL_OUTER && a->type->ndim == q->ndim &&
                outer_shape(q, a->type->ndim, a->type->shape))
                continue; /* a row's statistic broadcast over its row */
            return "an operand of the group broadcast in a way the kernel cannot index";
        }
        if (a->constant) continue;
        if (a->view_of_group) return "reads a value of the group through a view";
        if (a->depends_on_group) return "an operand from outside depends on the group (a cycle)";
    }
    *level = lv;
    return NULL;
    /* SKELETON
    (void)level;
    return "not implemented (lab05: kn_fuse_refusal)";
    END SOLUTION */
}
