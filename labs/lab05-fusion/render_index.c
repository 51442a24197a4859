/* render_index.c — lab 05 unit: the index arithmetic and the expressions of the C renderer
 * (kn_render_c_row_offset, kn_render_c_index, kn_render_c_bind; contracts in
 * kiln/codegen.h).
 *
 * A generated kernel (core/codegen/render_c.c) loops over rows o, computes the coordinate
 * cA of each outer axis A, and for each buffer b its row offset
 *
 *     const int64_t o1 = 12 + c0 * 40 + c2 * 5;      <- kn_render_c_row_offset(k, 1, ...)
 *
 * then loops over the inner axes (one loop r when there is one inner axis; else r with
 * coordinates r<axis>) and reads
 *
 *     p1[o1 + r * 8]                                  <- kn_render_c_index(k, 1, true, ...)
 *
 * The strides are the buffer's (kn_kbuf.stride, one per axis of the kernel's space): a
 * broadcast axis has stride 0 and must not appear at all; a stride of 1 is written without
 * "* 1" (the compiler would fold it, but a reader of the generated code should not have
 * to). Shapes and strides are constants in the text, so the C compiler sees `p1[o1 + r]`
 * and vectorizes the loop.
 *
 * The value computed at each point comes from kiln/scalar.h's expression templates, the
 * same formulas the interpreter's kernels use: "(0.5 * (x) * (1 + tanh(...)))" for gelu.
 * kn_render_c_bind puts the operands in (each in parentheses) and binds the math to the
 * type: a float kernel must call tanhf, not tanh, and write 0.5f, not 0.5, or C promotes
 * the whole expression to double and the kernel computes something else, more slowly. */
#include <string.h>

#include "kiln/codegen.h"

/* Append text to out (used bytes *n, capacity cap); false when it does not fit. */
static bool put(char *out, size_t cap, size_t *n, const char *text, size_t len) {
    if (*n + len + 1 > cap) return false;
    memcpy(out + *n, text, len);
    *n += len;
    out[*n] = 0;
    return true;
}

static bool putf(char *out, size_t cap, size_t *n, const char *prefix, long long a, const char *mid, long long b) {
    char t[96];
    int w = mid ? snprintf(t, sizeof t, "%s%lld%s%lld", prefix, a, mid, b) : snprintf(t, sizeof t, "%s%lld", prefix, a);
    return w > 0 && put(out, cap, n, t, (size_t)w);
}

kn_status kn_render_c_row_offset(const kn_kernel *k, int b, char *out, size_t cap) {
    if (!k || !out || cap == 0 || b < 0 || b >= k->nbufs) return kn_error(KN_ERR_ARG, "kn_render_c_row_offset: bad argument");
    (void)putf;
    out[0] = 0;
    return kn_not_implemented("lab05", "kn_render_c_row_offset: the offset plus cA * stride for each outer axis");
}

kn_status kn_render_c_index(const kn_kernel *k, int b, bool inner, char *out, size_t cap) {
    if (!k || !out || cap == 0 || b < 0 || b >= k->nbufs) return kn_error(KN_ERR_ARG, "kn_render_c_index: bad argument");
    (void)inner;
    out[0] = 0;
    return kn_not_implemented("lab05", "kn_render_c_index: the row offset o<b> plus the inner coordinates times their strides");
}

static bool is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

bool kn_render_c_bind(const char *tmpl, const char *const *args, const char *names, bool f32, char *out, size_t cap) {
    if (!tmpl || !args || !names || !out || cap == 0) return false;
    (void)args; (void)names; (void)f32; (void)is_ident; (void)put;
    out[0] = 0;
    kn_not_implemented("lab05", "kn_render_c_bind: substitute the operands, bind exp/log/... and literals to float");
    return false;
}
