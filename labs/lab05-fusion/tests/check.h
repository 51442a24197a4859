/* check.h — helpers for lab 05's tests (public and hidden): graphs from text, schedules,
 * kernels lowered from them, and the compiled program against the interpreter.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first: the fusion rule's answer and level, the index and bind
 * texts and their results, the compiled programs' outputs and stats. Under `make
 * test-lab05` that does nothing; under the grader your run only writes them, and the
 * staff's build of the same test (no code of yours in it) checks them, with its own
 * interpreter. */
#ifndef LAB05_CHECK_H
#define LAB05_CHECK_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/codegen.h"
#include "kiln/passes.h"
#include "kiln/nn.h"
#include "kiln/program.h"

/* The kernel cache the tests share (unless KILN_CACHE_DIR says otherwise): a kernel is
 * keyed by its source, flags and machine, so sharing is safe, and a second run of the tests
 * compiles nothing. */
static inline void l5_cache(void) {
    char d[96];
    snprintf(d, sizeof d, "/tmp/kiln-test-cache-%ld", (long)getuid());
    setenv("KILN_CACHE_DIR", d, 0);
}

static inline kn_graph *l5_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

static inline kn_schedule *l5_schedule(const kn_graph *g) {
    kn_schedule *s = NULL;
    KN_ASSERT_OK(kn_schedule_build(g, &s));
    return s;
}

/* The largest error of the compiled program relative to the interpreter (kn_out_compare:
 * the program's outputs and stats through kn_out). */
static inline double l5_compare(const kn_graph *g, uint64_t seed, kn_program_stats *st) {
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    return kn_out_compare(g, &o, seed, st);
}

/* kn_fuse_refusal: its answer (NULL, or the reason, copied to a buffer that the next call
 * overwrites) and *level through kn_out. */
static inline const char *l5_refusal(kn_fuse_query *q, int *level) {
    static char why[512];
    const char *r = kn_fuse_refusal(q, level);
    int32_t none = r == NULL;
    snprintf(why, sizeof why, "%s", r ? r : "");
    kn_out("kn_fuse_refusal answered NULL", &none, sizeof none);
    kn_out_text("kn_fuse_refusal's reason", why, sizeof why);
    kn_out("kn_fuse_refusal's level", level, sizeof *level);
    return none ? NULL : why;
}

/* kn_render_c_row_offset and kn_render_c_index: the status and the text through kn_out. */
static inline kn_status l5_row_offset(const kn_kernel *k, int b, char *out, size_t cap) {
    return kn_out_status_text("kn_render_c_row_offset", kn_render_c_row_offset(k, b, out, cap), out, cap);
}
static inline kn_status l5_index(const kn_kernel *k, int b, bool inner, char *out, size_t cap) {
    return kn_out_status_text("kn_render_c_index", kn_render_c_index(k, b, inner, out, cap), out, cap);
}

/* kn_render_c_bind: its answer and the text through kn_out. */
static inline bool l5_bind(const char *tmpl, const char *const *args, const char *names, bool f32, char *out, size_t cap) {
    int32_t ok = kn_render_c_bind(tmpl, args, names, f32, out, cap);
    kn_out("kn_render_c_bind's answer", &ok, sizeof ok);
    kn_out_text("kn_render_c_bind's text", out, cap);
    return ok != 0;
}

/* A query for a node of `type` (op) joining a fused open group over space (nd, shape). */
static inline kn_fuse_query l5_query(kn_op op, const kn_type *type, int nd, const int64_t *shape) {
    kn_fuse_query q = {.fused = true, .size = 1, .ndim = nd, .shape = shape, .op = op, .type = type};
    q.reduction = op == KN_OP_SUM || op == KN_OP_MEAN || op == KN_OP_MAX;
    return q;
}

/* A kernel with one buffer and the given space, for the index functions. */
static inline kn_kernel l5_kernel(int nd, const int64_t *shape, uint32_t inner, int64_t offset, const int64_t *stride,
                                  kn_kbuf *buf) {
    kn_kernel k;
    memset(&k, 0, sizeof k);
    k.ndim = nd;
    memcpy(k.shape, shape, sizeof(int64_t) * (size_t)nd);
    k.inner = inner;
    memset(buf, 0, sizeof *buf);
    buf->offset = offset;
    memcpy(buf->stride, stride, sizeof(int64_t) * (size_t)nd);
    k.bufs = buf;
    k.nbufs = 1;
    return k;
}

#endif
