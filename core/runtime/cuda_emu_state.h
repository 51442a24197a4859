/* cuda_emu_state.h: what the CUDA emulator's scheduler (cuda_emu.c) and its checks
 * (cuda_emu_check.c) share, and nothing else includes: the running thread and the epochs
 * the race check compares, the launch's kernel name, and the calls between the two files.
 * Hidden visibility: the generated kernels resolve the emulator's built-ins from the
 * executable (-rdynamic), and these are not built-ins. */
#ifndef KN_CUDA_EMU_STATE_H
#define KN_CUDA_EMU_STATE_H

#include "cuda_emu.h"

#define KN_EMU_INTERNAL __attribute__((visibility("hidden")))

enum { KN_EMU_MAX_THREADS = 1024 };

/* Set by the scheduler. The epoch counts barriers (and blocks): two accesses in the same
 * epoch have no barrier between them; kn_emu_warp_epoch counts each warp's meetings
 * (shuffles, mma, ldmatrix). The checks look only while kn_emu_active (a launch runs). */
extern KN_EMU_INTERNAL unsigned kn_emu_cur; /* the running thread, flat index in the block */
extern KN_EMU_INTERNAL int kn_emu_active;
extern KN_EMU_INTERNAL unsigned kn_emu_epoch;
extern KN_EMU_INTERNAL unsigned kn_emu_warp_epoch[KN_EMU_MAX_THREADS / 32];
extern KN_EMU_INTERNAL char kn_emu_kernel[128]; /* the launched kernel's name, for reports */

/* Scheduler (cuda_emu.c): stop the running thread at a faulting access (never returns to
 * it); the scheduler then ends the block. */
KN_EMU_INTERNAL void kn_emu_fault(void);

/* Checks (cuda_emu_check.c): at a launch's start (forget the last findings; register the
 * executable's own __shared__ section once), after each block (print its findings with
 * kernel, block, thread and line; returns how many, 0: clean), and at the launch's end
 * (forget the kn_emu_watch list). */
KN_EMU_INTERNAL void kn_emu_checks_begin(void);
KN_EMU_INTERNAL int kn_emu_report(void);
KN_EMU_INTERNAL void kn_emu_checks_end(void);

/* Flat thread or block index i of a d-shaped block or grid as (x, y, z). */
static inline kn_dim3 kn_emu_unflatten(unsigned i, kn_dim3 d)
{
    kn_dim3 r = { i % d.x, (i / d.x) % d.y, i / (d.x * d.y) };
    return r;
}

#endif
