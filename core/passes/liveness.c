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
    /* BEGIN SOLUTION */
    for (int s = 0; s < nsteps; s++) { /* check everything first: nothing is written on an error */
        const kn_mem_step *sp = &steps[s];
        if (sp->ndefs < 0 || sp->nuses < 0 || (sp->ndefs > 0 && !sp->defs) || (sp->nuses > 0 && !sp->uses))
            return kn_error(KN_ERR_ARG, "kn_mem_liveness: step %d: bad list (%d defs, %d uses)", s, sp->ndefs, sp->nuses);
        for (int k = 0; k < sp->ndefs; k++)
            if (sp->defs[k] < 0 || sp->defs[k] >= nvalues)
                return kn_error(KN_ERR_ARG, "kn_mem_liveness: step %d writes value %d, outside 0..%d", s, sp->defs[k],
                                nvalues - 1);
        for (int k = 0; k < sp->nuses; k++)
            if (sp->uses[k] < 0 || sp->uses[k] >= nvalues)
                return kn_error(KN_ERR_ARG, "kn_mem_liveness: step %d reads value %d, outside 0..%d", s, sp->uses[k],
                                nvalues - 1);
    }
    int32_t *def = kn_malloc(sizeof *def * 2 * (size_t)nvalues), *use = def + nvalues; /* one block, two halves */
    if (!def) return kn_error(KN_ERR_OOM, "kn_mem_liveness: out of memory for %d values", nvalues);
    for (int v = 0; v < nvalues; v++) def[v] = use[v] = -1;
    kn_status st = KN_OK;
    for (int s = 0; s < nsteps && st == KN_OK; s++) {
        const kn_mem_step *sp = &steps[s];
        for (int k = 0; k < sp->ndefs && st == KN_OK; k++) {
            int32_t v = sp->defs[k];
            if (def[v] >= 0) st = kn_error(KN_ERR_ARG, "kn_mem_liveness: value %d is written by step %d and again by "
                                           "step %d", v, def[v], s);
            else if (use[v] >= 0) st = kn_error(KN_ERR_ARG, "kn_mem_liveness: value %d is read by step %d before step "
                                                "%d writes it", v, use[v], s);
            else def[v] = s;
        }
        for (int k = 0; k < sp->nuses; k++) use[sp->uses[k]] = s;
    }
    for (int v = 0; v < nvalues && st == KN_OK; v++) {
        first[v] = def[v];
        last[v] = use[v] > def[v] ? use[v] : def[v];
    }
    kn_free(def);
    return st;
    /* SKELETON
    // One walk over the steps: a write gives a value its first step, every write or read
    // moves its last step forward. Refuse what the contract refuses, before writing
    // anything.
    return kn_not_implemented("lab08", "kn_mem_liveness: each value's first and last step");
    END SOLUTION */
}
