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


const char *kn_fuse_refusal(const kn_fuse_query *q, int *level) {
    if (!q || !level) return "no query";
    (void)level;
    return "not implemented (lab05: kn_fuse_refusal)";
}
