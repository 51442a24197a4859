/* render_impl.h — what the C renderer (render_c.c) shares with the CUDA renderer
 * (render_cuda.c): the output buffer, the expression scope, and the pieces of a row that
 * both dialects write the same way. Internal to core/codegen/. */
#ifndef KN_RENDER_IMPL_H
#define KN_RENDER_IMPL_H

#include "kiln/codegen.h"

typedef struct kn_rout {     /* a growing NUL-terminated string; the first error sticks */
    char **s;
    size_t *len, *cap;
    kn_status st;
} kn_rout;

void kn_remit(kn_rout *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct kn_rc {
    const kn_kernel *k;
    kn_rout o;
    bool *done;          /* per entry: has a name in the current scope */
    int *cached;         /* per entry: the accumulator whose row buffer holds it, or -1 */
    int single;          /* the inner axis when there is exactly one, else -1 */
    const char *ix;      /* the index type: "int64_t", or "int" where every index fits */
    const char *rb_at;   /* the index of a row buffer: "r" (C), "j" (CUDA: a thread's slot) */
    bool checked;        /* the CUDA emulator dialect: every global access through KN_EMU_AT,
                          * which reports an index outside the buffer's view (cuda_emu.h) */
} kn_rc;

kn_status kn_rc_init(kn_rc *c, const kn_kernel *k, char **src, size_t *len, size_t *cap); /* verifies k */
void kn_rc_clear(kn_rc *c);
const char *kn_rc_ctype(kn_dtype dt);  /* the type an entry computes in: "float" (f32, f16, bf16), "double", "unsigned char" */
const char *kn_rc_stype(kn_dtype dt);  /* the type a buffer holds: "unsigned short" for f16 and bf16, else kn_rc_ctype */
bool kn_rc_low(kn_dtype dt);           /* f16 or bf16: loads convert to float, stores round */
const char *kn_lowp_source(void);      /* their conversions, for every prelude (KN_DEVICE functions) */
void kn_rc_name(const kn_rc *c, int i, char *buf, size_t cap); /* entry i where it is used */
/* Define entry i (and first what it needs) in the current scope: full, inside an inner
 * loop over r; else at row level (outer entries only). */
void kn_rc_define(kn_rc *c, int i, bool full, int indent);
void kn_rc_close_scope(kn_rc *c);                   /* forget the full entries of a loop */
void kn_rc_params(kn_rc *c, const char *restrict_kw); /* "float *R p0, const float *R p1" */
void kn_rc_inner_coords(kn_rc *c, int indent);      /* r -> r<axis> (several inner axes) */
void kn_rc_row_setup(kn_rc *c, int indent);         /* o -> c<axis>, row offsets, outer entries */
void kn_rc_full_stores(kn_rc *c, int indent);       /* in an inner loop: the full stores */
/* An elementwise kernel unrolled over n elements a thread: the value and index arrays, then
 * phase 0 (define and keep each store, in the loop over u) and phase 1 (store them). */
void kn_rc_split_decls(kn_rc *c, int n, int indent);
void kn_rc_full_stores_split(kn_rc *c, int phase, int indent);
void kn_rc_outer_stores(kn_rc *c, const char *guard, int indent);
void kn_rc_acc_value(kn_rc *c, int i, int indent);  /* a<i> from s<i>, then what it enables */

#endif
