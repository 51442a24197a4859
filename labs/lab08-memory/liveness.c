/* liveness.c — lab 08 unit: the lifetimes of a schedule's values (kn_mem_liveness,
 * contract in kiln/passes.h).
 *
 * A compiled program is a list of steps in the order they run; each writes some values
 * and reads others. Before anything can share memory we need to know, for every value,
 * when it comes into being and when it is needed for the last time: its lifetime, the
 * interval [first, last] of steps over which its bytes must stay untouched. Outside that
 * interval the bytes are free for another value.
 *
 * One walk over the steps in order does it. A write sets first (and last: a value nobody
 * reads still occupies its bytes while its step runs); a read moves last forward. The walk
 * also checks that the schedule makes sense, because the planner trusts these numbers
 * with memory: a value written twice has no single lifetime, and a value read before it is
 * written would be read from bytes another value may still own. A value that is read but
 * never written (an input, a parameter: memory the caller owns) keeps first = -1. */
#include <string.h>

#include "kiln/passes.h"

kn_status kn_mem_liveness(const kn_mem_step *steps, int nsteps, int nvalues, int32_t *first, int32_t *last) {
    if (nsteps < 0 || nvalues < 0)
        return kn_error(KN_ERR_ARG, "kn_mem_liveness: negative count (%d steps, %d values)", nsteps, nvalues);
    if ((nsteps > 0 && !steps) || (nvalues > 0 && (!first || !last)))
        return kn_error(KN_ERR_ARG, "kn_mem_liveness: NULL array");
    // One walk over the steps: a write gives a value its first step, every write or read
    // moves its last step forward. Refuse what the contract refuses, before writing
    // anything.
    return kn_not_implemented("lab08", "kn_mem_liveness: each value's first and last step");
}
