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
    /* BEGIN SOLUTION */
    size_t n = 0;
    const kn_kbuf *kb = &k->bufs[b];
    bool ok = putf(out, cap, &n, "", (long long)kb->offset, NULL, 0);
    for (int ax = 0; ok && ax < k->ndim; ax++) {
        if (((k->inner >> ax) & 1u) || kb->stride[ax] == 0) continue;
        ok = putf(out, cap, &n, " + c", ax, " * ", (long long)kb->stride[ax]);
    }
    if (ok) return KN_OK;
    out[0] = 0;
    return kn_error(KN_ERR_ARG, "kn_render_c_row_offset: more than %zu bytes", cap);
    /* SKELETON
    (void)putf;
    out[0] = 0;
    return kn_not_implemented("lab05", "kn_render_c_row_offset: the offset plus cA * stride for each outer axis");
    END SOLUTION */
}

kn_status kn_render_c_index(const kn_kernel *k, int b, bool inner, char *out, size_t cap) {
    if (!k || !out || cap == 0 || b < 0 || b >= k->nbufs) return kn_error(KN_ERR_ARG, "kn_render_c_index: bad argument");
    /* BEGIN SOLUTION */
    size_t n = 0;
    bool ok = putf(out, cap, &n, "o", b, NULL, 0);
    int ninner = 0;
    for (int ax = 0; ax < k->ndim; ax++) ninner += (k->inner >> ax) & 1u;
    for (int ax = 0; ok && inner && ax < k->ndim; ax++) {
        int64_t s = k->bufs[b].stride[ax];
        if (!((k->inner >> ax) & 1u) || s == 0) continue;
        ok = ninner == 1 ? put(out, cap, &n, " + r", 4) : putf(out, cap, &n, " + r", ax, NULL, 0);
        if (ok && s != 1) ok = putf(out, cap, &n, " * ", (long long)s, NULL, 0);
    }
    if (ok) return KN_OK;
    out[0] = 0;
    return kn_error(KN_ERR_ARG, "kn_render_c_index: more than %zu bytes", cap);
    /* SKELETON
    (void)inner;
    out[0] = 0;
    return kn_not_implemented("lab05", "kn_render_c_index: the row offset o<b> plus the inner coordinates times their strides");
    END SOLUTION */
}

static bool is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

bool kn_render_c_bind(const char *tmpl, const char *const *args, const char *names, bool f32, char *out, size_t cap) {
    if (!tmpl || !args || !names || !out || cap == 0) return false;
    /* BEGIN SOLUTION */
    static const char *const math[] = {"exp", "log", "sqrt", "tanh", "fabs", "sin", "cos", "pow"};
    size_t n = 0;
    out[0] = 0; /* an empty template binds to "" */
    for (const char *p = tmpl; *p;) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_') {
            const char *q = p;
            while (is_ident(*q)) q++;
            size_t l = (size_t)(q - p);
            const char *hit = l == 1 ? strchr(names, *p) : NULL;
            if (hit) {
                const char *a = args[hit - names];
                if (!put(out, cap, &n, "(", 1) || !put(out, cap, &n, a, strlen(a)) || !put(out, cap, &n, ")", 1)) return false;
            } else {
                if (!put(out, cap, &n, p, l)) return false;
                for (size_t m = 0; f32 && m < sizeof math / sizeof math[0]; m++)
                    if (strlen(math[m]) == l && !strncmp(math[m], p, l) && !put(out, cap, &n, "f", 1)) return false;
            }
            p = q;
        } else if (*p >= '0' && *p <= '9') {
            const char *q = p;
            bool flt = false;
            while (is_ident(*q) || *q == '.' || ((*q == '-' || *q == '+') && (q[-1] == 'e' || q[-1] == 'E'))) {
                flt |= *q == '.' || *q == 'e' || *q == 'E';
                q++;
            }
            if (!put(out, cap, &n, p, (size_t)(q - p))) return false;
            if (f32 && flt && !put(out, cap, &n, "f", 1)) return false;
            p = q;
        } else {
            if (!put(out, cap, &n, p, 1)) return false;
            p++;
        }
    }
    return true;
    /* SKELETON
    (void)args; (void)names; (void)f32; (void)is_ident; (void)put;
    out[0] = 0;
    kn_not_implemented("lab05", "kn_render_c_bind: substitute the operands, bind exp/log/... and literals to float");
    return false;
    END SOLUTION */
}
