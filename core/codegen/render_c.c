/* render_c.c — the C renderer: kernel IR in, C11 out.
 *
 * One function per kernel, with the signature kn_k_parallel calls, so kiln's own threads
 * split the outer index range:
 *
 *     void k3(void *ctx, int64_t lo, int64_t hi)
 *     {
 *         for (int64_t o = lo; o < hi; o++) {          // one row (outer index)
 *             ...coordinates of o, each buffer's offset at this row...
 *             double a5 = 0;                            // an accumulator
 *             for (int64_t r = 0; r < 768; r++) { ... a5 += f4; }
 *             ...values computed once per row (w*), then the full stores...
 *         }
 *     }
 *
 * Shapes and strides are constants in the source, so the inner loop of a contiguous kernel
 * is `p[o0 + r]` and the compiler vectorizes it. The scalar functions come from
 * kiln/scalar.h as C expression strings (the same formulas the interpreter's kernels run);
 * the renderer binds them to a type: for float it writes expf, tanhf, ... and float
 * literals, so an f32 kernel computes in float as the interpreter does. Reductions sum in
 * double, as the interpreter's kernels do.
 *
 * f16 and bf16 (mixed precision): a buffer of them is `unsigned short`; a load converts
 * to float, every expression of theirs computes in float, and a store rounds to nearest
 * even (kn_lowp_source: bit-exact conversions written in plain C, the same text for the
 * host compiler, NVRTC and the CUDA emulator, no cuda_bf16.h). So a fused chain rounds
 * once, where it stores, as a GPU kernel does; a cast to f16 or bf16 rounds where it
 * stands, since that is what a cast means. */
#include <stdarg.h>
#include <string.h>

#include "kiln/codegen.h"
#include "kiln/scalar.h"
#include "codegen/render_impl.h"

#define KN_ROW_BUFFER 4096 /* longest row kept in a stack buffer between a row kernel's loops */
#define KN_LANES 8         /* accumulators of a reduction over a row of 2 * KN_LANES or more */

void kn_remit(kn_rout *o, const char *fmt, ...) {
    if (o->st != KN_OK) return;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (w < 0) { va_end(ap2); o->st = kn_error(KN_ERR_INTERNAL, "kn_render_c: bad format"); return; }
    if (*o->len + (size_t)w + 1 > *o->cap) {
        size_t nc = *o->cap ? *o->cap * 2 : 8192;
        while (nc < *o->len + (size_t)w + 1) nc *= 2;
        char *p = kn_realloc(*o->s, nc);
        if (!p) { va_end(ap2); o->st = kn_error(KN_ERR_OOM, "kn_render_c: out of memory"); return; }
        *o->s = p;
        *o->cap = nc;
    }
    vsnprintf(*o->s + *o->len, (size_t)w + 1, fmt, ap2);
    va_end(ap2);
    *o->len += (size_t)w;
}

/* The f16/bf16 conversions every generated kernel may call, in the subset of C that C11,
 * CUDA C++ (NVRTC) and the emulator dialect share: unions for the bits, unsigned short and
 * unsigned int for the words. Round to nearest even, NaN kept quiet, overflow to Inf,
 * f16 subnormals exact: bitwise kn_f32_to_f16/_bf16 of core/base (tested). KN_DEVICE is
 * each prelude's qualifier for a helper function. */
const char *kn_lowp_source(void) {
    return "typedef union { float f; unsigned int u; } kn_fbits;\n"
           "KN_DEVICE float kn_bf16_load(unsigned short h)\n{\n"
           "    kn_fbits v;\n    v.u = (unsigned int)h << 16;\n"
           "    if ((v.u & 0x7fffffffu) > 0x7f800000u) v.u |= 0x400000u;\n    return v.f;\n}\n"
           "KN_DEVICE unsigned short kn_bf16_store(float x)\n{\n"
           "    kn_fbits v;\n    v.f = x;\n"
           "    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);\n"
           "    return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);\n}\n"
           "KN_DEVICE float kn_f16_load(unsigned short h)\n{\n"
           "    unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
           "    kn_fbits v;\n"
           "    if (e == 0x1fu) v.u = s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u);\n"
           "    else if (e == 0u) { v.f = (float)m * 5.9604644775390625e-8f; v.u |= s; }\n"
           "    else v.u = s | ((e + 112u) << 23) | (m << 13);\n    return v.f;\n}\n"
           "KN_DEVICE unsigned short kn_f16_store(float x)\n{\n"
           "    kn_fbits v;\n    v.f = x;\n"
           "    unsigned int s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;\n"
           "    if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
           "    if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);\n"
           "    if (a >= 0x38800000u) return (unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));\n"
           "    if (a <= 0x33000000u) return (unsigned short)s;\n"
           "    unsigned int sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u, q = m >> sh, r = m & ((1u << sh) - 1u);\n"
           "    unsigned int half = 1u << (sh - 1u);\n"
           "    if (r > half || (r == half && (q & 1u))) q++;\n"
           "    return (unsigned short)(s | q);\n}\n"
           "KN_DEVICE float kn_bf16_round(float x) { return kn_bf16_load(kn_bf16_store(x)); }\n"
           "KN_DEVICE float kn_f16_round(float x) { return kn_f16_load(kn_f16_store(x)); }\n\n";
}

const char *kn_render_c_prelude(void) { return kn_render_c_prelude_math(true); }

const char *kn_render_c_prelude_math(bool vector_math) {
    /* With glibc's libmvec, the SIMD variants of exp, log and tanh are declared so that the
     * compiler vectorizes the loops that call them (GCC picks the variant for the ISA). */
    static const char plain[] = "/* generated by kiln (core/codegen/render_c.c): do not edit */\n"
                                "#include <math.h>\n#include <stdint.h>\n#define KN_DEVICE static inline\n\n";
    static const char vec[] = "/* generated by kiln (core/codegen/render_c.c): do not edit */\n"
                              "#include <math.h>\n#include <stdint.h>\n"
                              "#pragma omp declare simd notinbranch\nextern float expf(float);\n"
                              "#pragma omp declare simd notinbranch\nextern float logf(float);\n"
                              "#pragma omp declare simd notinbranch\nextern float tanhf(float);\n"
                              "#pragma omp declare simd notinbranch\nextern double exp(double);\n"
                              "#pragma omp declare simd notinbranch\nextern double log(double);\n"
                              "#pragma omp declare simd notinbranch\nextern double tanh(double);\n"
                              "#define KN_DEVICE static inline\n\n";
    static char with_plain[8192], with_vec[8192];
    if (!with_plain[0]) { /* written once, the same bytes every time (the kernel cache hashes them) */
        snprintf(with_plain, sizeof with_plain, "%s%s", plain, kn_lowp_source());
        snprintf(with_vec, sizeof with_vec, "%s%s", vec, kn_lowp_source());
    }
    return vector_math && kn_cc_vector_math() ? with_vec : with_plain;
}

bool kn_rc_low(kn_dtype dt) { return dt == KN_DT_F16 || dt == KN_DT_BF16; }

const char *kn_rc_ctype(kn_dtype dt) {
    if (dt == KN_DT_I32) return "int"; /* onehot's indices (no stdint.h under NVRTC) */
    if (dt == KN_DT_I64) return "long long";
    return dt == KN_DT_F32 || kn_rc_low(dt) ? "float" : dt == KN_DT_F64 ? "double" : "unsigned char";
}

const char *kn_rc_stype(kn_dtype dt) { return kn_rc_low(dt) ? "unsigned short" : kn_rc_ctype(dt); }

/* An expression of dtype dt as it is stored in a buffer of dt (rounded for f16, bf16). */
static void stored(char *buf, size_t cap, kn_dtype dt, const char *v) {
    if (kn_rc_low(dt)) snprintf(buf, cap, "kn_%s_store(%s)", kn_dtype_name(dt), v);
    else snprintf(buf, cap, "%s", v);
}

static void literal(char *buf, size_t cap, kn_dtype dt, double v) {
    if (dt == KN_DT_BF16) v = kn_bf16_to_f32(kn_f64_to_bf16(v)); /* the constant the dtype holds */
    if (dt == KN_DT_F16) v = kn_f16_to_f32(kn_f64_to_f16(v));
    if (isnan(v)) snprintf(buf, cap, "((%s)NAN)", kn_rc_ctype(dt));
    else if (isinf(v)) snprintf(buf, cap, "((%s)%sINFINITY)", kn_rc_ctype(dt), v < 0 ? "-" : "");
    else snprintf(buf, cap, "((%s)%.17g)", kn_rc_ctype(dt), v);
}

/* The name an entry has where it is used (constants are literals). */
void kn_rc_name(const kn_rc *c, int i, char *buf, size_t cap) {
    const kn_kx *x = &c->k->x[i];
    if (x->kind == KN_KX_CONST) literal(buf, cap, x->dtype, x->value);
    else if (x->kind == KN_KX_ACC) snprintf(buf, cap, "a%d", i);
    else snprintf(buf, cap, "%s%d", x->full ? "f" : "w", i);
}

/* The C expression of axis ax's coordinate (outer: cN; inner: r or rN). */
static void coord(const kn_rc *c, int ax, char *buf, size_t cap) {
    if (!((c->k->inner >> ax) & 1u)) snprintf(buf, cap, "c%d", ax);
    else if (c->single == ax) snprintf(buf, cap, "r");
    else snprintf(buf, cap, "r%d", ax);
}

/* Element ix of buffer b, as an lvalue: p<b>[ix]; or, checked (the emulator dialect), through
 * KN_EMU_AT with the range of elements the buffer's view can reach (offset plus every
 * stride's reach), so an index outside it is reported with the kernel's line instead of
 * touching memory (cuda_emu.h). */
static void element(const kn_rc *c, int b, const char *ix, bool write, char *buf, size_t cap) {
    if (!c->checked) {
        snprintf(buf, cap, "p%d[%s]", b, ix);
        return;
    }
    const kn_kernel *k = c->k;
    int64_t lo = k->bufs[b].offset, hi = k->bufs[b].offset;
    for (int ax = 0; ax < k->ndim; ax++) {
        int64_t reach = (k->shape[ax] - 1) * k->bufs[b].stride[ax];
        if (reach < 0) lo += reach;
        else hi += reach;
    }
    snprintf(buf, cap, "(*KN_EMU_AT(p%d, %s, %lldLL, %lldLL, %d, %d))", b, ix, (long long)lo, (long long)hi + 1, b,
             write ? 1 : 0);
}

static void expr_of(kn_rc *c, int i, char *buf, size_t cap) {
    const kn_kx *x = &c->k->x[i];
    char a[3][48];
    const char *args[3] = {a[0], a[1], a[2]};
    for (int j = 0; j < x->nin && j < 3; j++) kn_rc_name(c, x->in[j], a[j], sizeof a[j]);
    if (x->op == KN_OP_UNARY_GRAD) snprintf(a[2], sizeof a[2], "t%d", i); /* defined by define() */
    bool f32 = x->dtype == KN_DT_F32 || kn_rc_low(x->dtype); /* float math */
    const char *tmpl = NULL, *names = "ab";
    kn_unary_op u;
    kn_binary_op bo;
    switch (x->kind) {
    case KN_KX_LOAD: {
        char ix[256];
        kn_status st = kn_render_c_index(c->k, x->buf, x->full, ix, sizeof ix);
        if (st != KN_OK && c->o.st == KN_OK) c->o.st = st;
        char at[400];
        element(c, x->buf, st == KN_OK ? ix : "0", false, at, sizeof at);
        if (kn_rc_low(x->dtype)) snprintf(buf, cap, "kn_%s_load(%s)", kn_dtype_name(x->dtype), at);
        else snprintf(buf, cap, "%s", at);
        return;
    }
    case KN_KX_CONST: literal(buf, cap, x->dtype, x->value); return;
    case KN_KX_ACC: snprintf(buf, cap, "a%d", i); return;
    case KN_KX_OP: break;
    }
    if (kn_op_unary(x->op, &u)) { tmpl = kn_sc_unary_expr(u); names = "x"; }
    else if (kn_op_binary(x->op, &bo) && x->op != KN_OP_EQ) tmpl = kn_sc_binary_expr(bo);
    else if (x->op == KN_OP_UNARY_GRAD) { tmpl = kn_sc_unary_grad_expr((kn_unary_op)x->fn); names = "dxt"; }
    else if (x->op == KN_OP_EQ) { snprintf(buf, cap, "(unsigned char)((%s) == (%s))", a[0], a[1]); return; }
    else if (x->op == KN_OP_WHERE) { snprintf(buf, cap, "((%s) ? (%s) : (%s))", a[0], a[1], a[2]); return; }
    else if (x->op == KN_OP_CAST) {
        if (x->dtype == KN_DT_BOOL) snprintf(buf, cap, "(unsigned char)((%s) != 0)", a[0]);
        else if (kn_rc_low(x->dtype)) snprintf(buf, cap, "kn_%s_round((float)(%s))", kn_dtype_name(x->dtype), a[0]);
        else snprintf(buf, cap, "(%s)(%s)", kn_rc_ctype(x->dtype), a[0]);
        return;
    } else if (x->op == KN_OP_ONEHOT) {
        char col[16];
        coord(c, (int)x->rows, col, sizeof col);
        snprintf(buf, cap, "(unsigned char)((long long)(%s) == (long long)(%s))", a[0], col);
        return;
    } else if (x->op == KN_OP_CAUSAL_FILL) {
        char row[16], col[16], lit[64];
        coord(c, c->k->ndim - 2, row, sizeof row);
        coord(c, c->k->ndim - 1, col, sizeof col);
        literal(lit, sizeof lit, x->dtype, x->fill);
        snprintf(buf, cap, "(%s > %s + %lld ? %s : (%s))", col, row, (long long)(x->cols - x->rows), lit, a[0]);
        return;
    }
    if (!tmpl) {
        if (c->o.st == KN_OK)
            c->o.st = kn_error(KN_ERR_UNSUPPORTED, "kn_render_c: %s: no C expression for x%d = %s", c->k->name, i,
                               kn_op_name(x->op));
        buf[0] = 0;
    } else if (!kn_render_c_bind(tmpl, args, names, f32, buf, cap)) {
        if (c->o.st == KN_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", kn_last_error());
            c->o.st = kn_error(KN_ERR_UNSUPPORTED, "kn_render_c: %s: x%d = %s: kn_render_c_bind failed (%s)", c->k->name,
                               i, kn_op_name(x->op), why);
        }
        buf[0] = 0;
    }
}

/* Define entry i (and, first, what it needs) in the current scope. full: inside an inner
 * loop (full entries allowed); else at row level (outer entries only). */
void kn_rc_define(kn_rc *c, int i, bool full, int indent) {
    if (c->done[i] || c->o.st != KN_OK) return;
    const kn_kx *x = &c->k->x[i];
    if (x->kind == KN_KX_CONST) { c->done[i] = true; return; }
    if (x->kind == KN_KX_ACC) return; /* defined by its loop */
    if (x->full && !full) return;
    if (x->full && c->cached[i] >= 0) { /* computed by an earlier loop over this row: read it back */
        kn_remit(&c->o, "%*sconst %s f%d = rb%d[%s];\n", indent, "", kn_rc_ctype(x->dtype), i, c->cached[i], c->rb_at);
        c->done[i] = true;
        return;
    }
    for (int j = 0; j < x->nin; j++) kn_rc_define(c, x->in[j], full, indent);
    for (int j = 0; j < x->nin; j++)
        if (!c->done[x->in[j]]) return; /* needs an accumulator not computed yet */
    char e[2048];
    if (x->kind == KN_KX_OP && x->op == KN_OP_UNARY_GRAD && kn_sc_unary_grad_needs_t((kn_unary_op)x->fn)) {
        char b[48]; /* the gradient's t(x), once (gelu's tanh) */
        const char *args[1] = {b};
        kn_rc_name(c, x->in[1], b, sizeof b);
        if (!kn_render_c_bind(kn_sc_unary_grad_t_expr((kn_unary_op)x->fn), args, "x",
                              x->dtype == KN_DT_F32 || kn_rc_low(x->dtype), e, sizeof e)) {
            if (c->o.st == KN_OK) c->o.st = kn_error(KN_ERR_UNSUPPORTED, "kn_render_c: %s: x%d = unary_grad: kn_render_c_bind "
                                                     "failed", c->k->name, i);
            return;
        }
        kn_remit(&c->o, "%*sconst %s t%d = %s;\n", indent, "", kn_rc_ctype(x->dtype), i, e);
    }
    expr_of(c, i, e, sizeof e);
    char nm[32];
    kn_rc_name(c, i, nm, sizeof nm);
    kn_remit(&c->o, "%*sconst %s %s = %s;\n", indent, "", kn_rc_ctype(x->dtype), nm, e);
    c->done[i] = true;
}

/* The coordinates of several inner axes, from the flat inner index r (nothing when there
 * is one inner axis: it is r itself). */
void kn_rc_inner_coords(kn_rc *c, int indent) {
    const kn_kernel *k = c->k;
    if (c->single >= 0) return;
    kn_remit(&c->o, "%*s%s q = r;\n", indent, "", c->ix);
    for (int ax = k->ndim - 1; ax >= 0; ax--) {
        if (!((k->inner >> ax) & 1u)) continue;
        kn_remit(&c->o, "%*sconst %s r%d = q %% %lld; q /= %lld;\n", indent, "", c->ix, ax, (long long)k->shape[ax],
                 (long long)k->shape[ax]);
    }
    kn_remit(&c->o, "%*s(void)q;\n", indent, "");
}

/* Open an inner loop (coordinates of several inner axes when there are several). */
static void open_inner(kn_rc *c, int indent) {
    kn_remit(&c->o, "%*sfor (int64_t r = 0; r < %lld; r++) {\n", indent, "", (long long)c->k->inner_n);
    kn_rc_inner_coords(c, indent + 4);
}

/* Forget the full entries of a closed loop. */
void kn_rc_close_scope(kn_rc *c) {
    for (int i = 0; i < c->k->nx; i++)
        if (c->k->x[i].full) c->done[i] = false;
}

kn_status kn_rc_init(kn_rc *c, const kn_kernel *k, char **src, size_t *len, size_t *cap) {
    *c = (kn_rc){.k = k, .o = {src, len, cap, KN_OK}, .ix = "int64_t", .rb_at = "r"};
    if (!k || !src || !len || !cap) return kn_error(KN_ERR_ARG, "kn_render_c: NULL argument");
    KN_TRY(kn_kernel_verify(k));
    c->done = kn_calloc((size_t)k->nx + 1, sizeof *c->done);
    c->cached = kn_malloc(((size_t)k->nx + 1) * sizeof *c->cached);
    if (!c->done || !c->cached) {
        kn_rc_clear(c);
        return kn_error(KN_ERR_OOM, "kn_render_c: out of memory");
    }
    for (int i = 0; i < k->nx; i++) c->cached[i] = -1;
    int ninner = 0;
    c->single = -1;
    for (int ax = 0; ax < k->ndim; ax++)
        if ((k->inner >> ax) & 1u) { ninner++; c->single = ax; }
    if (ninner != 1) c->single = -1;
    return KN_OK;
}

void kn_rc_clear(kn_rc *c) {
    kn_free(c->done);
    kn_free(c->cached);
    c->done = NULL;
    c->cached = NULL;
}

/* The kernel's parameters; restrict_kw ("__restrict__") on every buffer the memory plan did
 * not alias (today the plan aliases only C kernels' buffers: this keeps CUDA right if it
 * ever does). */
void kn_rc_params(kn_rc *c, const char *restrict_kw) {
    const kn_kernel *k = c->k;
    for (int b = 0; b < k->nbufs; b++)
        kn_remit(&c->o, "%s%s%s *%s p%d", b ? ", " : "", k->bufs[b].store ? "" : "const ", kn_rc_stype(k->bufs[b].dtype),
                 k->bufs[b].aliased ? "" : restrict_kw, b);
}

/* At the top of a row: the coordinates c<A> of the outer index o, each buffer's row offset
 * o<b>, and the entries that need no accumulator. */
void kn_rc_row_setup(kn_rc *c, int indent) {
    const kn_kernel *k = c->k;
    kn_rout *o = &c->o;
    int nouter = 0;
    for (int ax = 0; ax < k->ndim; ax++) nouter += !((k->inner >> ax) & 1u);
    if (nouter > 0) kn_remit(o, "%*s%s q = o;\n", indent, "", c->ix);
    int left = nouter;
    for (int ax = k->ndim - 1; ax >= 0; ax--) {
        if ((k->inner >> ax) & 1u) continue;
        if (--left == 0) kn_remit(o, "%*sconst %s c%d = q;\n", indent, "", c->ix, ax);
        else kn_remit(o, "%*sconst %s c%d = q %% %lld; q /= %lld;\n", indent, "", c->ix, ax, (long long)k->shape[ax],
                      (long long)k->shape[ax]);
    }
    if (nouter > 0) kn_remit(o, "%*s(void)q;\n", indent, "");
    for (int ax = 0; ax < k->ndim; ax++)
        if (!((k->inner >> ax) & 1u)) kn_remit(o, "%*s(void)c%d;\n", indent, "", ax);
    for (int b = 0; b < k->nbufs && o->st == KN_OK; b++) {
        char off[512];
        kn_status st = kn_render_c_row_offset(k, b, off, sizeof off);
        if (st != KN_OK) o->st = st;
        else kn_remit(o, "%*sconst %s o%d = %s;\n", indent, "", c->ix, b, off);
    }
    for (int i = 0; i < k->nx; i++) kn_rc_define(c, i, false, indent);
}

/* Inside an inner loop: define and store every full store's value. */
void kn_rc_full_stores(kn_rc *c, int indent) {
    const kn_kernel *k = c->k;
    for (int s = 0; s < k->nstores; s++) /* every load before the first store: a store may overwrite a load in place */
        if (k->x[k->stores[s].src].full) kn_rc_define(c, k->stores[s].src, true, indent);
    for (int s = 0; s < k->nstores && c->o.st == KN_OK; s++) {
        const kn_kstore *st = &k->stores[s];
        if (!k->x[st->src].full) continue;
        char nm[48], ix[256], v[80];
        kn_rc_name(c, st->src, nm, sizeof nm);
        kn_status e = kn_render_c_index(k, st->buf, true, ix, sizeof ix);
        if (e != KN_OK) { c->o.st = e; break; }
        stored(v, sizeof v, k->bufs[st->buf].dtype, nm);
        char at[400];
        element(c, st->buf, ix, true, at, sizeof at);
        kn_remit(&c->o, "%*s%s = %s;\n", indent, "", at, v);
    }
}

/* The full stores of an elementwise kernel unrolled over several elements a thread
 * (render_cuda.c), in two phases. Declarations: a value and an element index per store and
 * unrolled element, kn_v<s>[n] and kn_i<s>[n]. Phase 0 (inside the loop over u): define each
 * store's value and keep it with its index. Phase 1 (a second loop over u): store them. So
 * every load of the thread's elements comes before its first store, and the compiler can
 * issue them together even where a stored buffer may alias a loaded one (written in place,
 * hence no __restrict__): the loads are in flight at once instead of one element's at a time. */
void kn_rc_split_decls(kn_rc *c, int n, int indent) {
    const kn_kernel *k = c->k;
    for (int s = 0; s < k->nstores; s++)
        kn_remit(&c->o, "%*s%s kn_v%d[%d];\n%*s%s kn_i%d[%d];\n", indent, "", kn_rc_stype(k->bufs[k->stores[s].buf].dtype),
                 s, n, indent, "", c->ix, s, n);
}

void kn_rc_full_stores_split(kn_rc *c, int phase, int indent) {
    const kn_kernel *k = c->k;
    if (phase == 0)
        for (int s = 0; s < k->nstores; s++) kn_rc_define(c, k->stores[s].src, true, indent);
    for (int s = 0; s < k->nstores && c->o.st == KN_OK; s++) {
        const kn_kstore *st = &k->stores[s];
        char nm[48], ix[256], v[80], vs[32], is[32], at[400];
        snprintf(vs, sizeof vs, "kn_v%d[u]", s);
        snprintf(is, sizeof is, "kn_i%d[u]", s);
        if (phase == 0) {
            kn_rc_name(c, st->src, nm, sizeof nm);
            kn_status e = kn_render_c_index(k, st->buf, true, ix, sizeof ix);
            if (e != KN_OK) { c->o.st = e; break; }
            stored(v, sizeof v, k->bufs[st->buf].dtype, nm);
            kn_remit(&c->o, "%*s%s = %s;\n%*s%s = %s;\n", indent, "", vs, v, indent, "", is, ix);
        } else {
            element(c, st->buf, is, true, at, sizeof at);
            kn_remit(&c->o, "%*s%s = %s;\n", indent, "", at, vs);
        }
    }
}

/* After the row's loops: the outer stores (guard: a condition that picks one thread, or
 * NULL), then a (void) for each outer entry nothing stored, so -Wunused stays quiet. */
void kn_rc_outer_stores(kn_rc *c, const char *guard, int indent) {
    const kn_kernel *k = c->k;
    for (int s = 0; s < k->nstores; s++) /* every load before the first store (in place) */
        if (!k->x[k->stores[s].src].full) kn_rc_define(c, k->stores[s].src, false, indent);
    for (int s = 0; s < k->nstores; s++) {
        const kn_kstore *st = &k->stores[s];
        if (k->x[st->src].full) continue;
        char nm[48], v[80], ix[16], at[160];
        kn_rc_name(c, st->src, nm, sizeof nm);
        stored(v, sizeof v, k->bufs[st->buf].dtype, nm);
        snprintf(ix, sizeof ix, "o%d", st->buf);
        element(c, st->buf, ix, true, at, sizeof at);
        if (guard) kn_remit(&c->o, "%*sif (%s) %s = %s;\n", indent, "", guard, at, v);
        else kn_remit(&c->o, "%*s%s = %s;\n", indent, "", at, v);
    }
    for (int i = 0; i < k->nx; i++)
        if (c->done[i] && !k->x[i].full && k->x[i].kind == KN_KX_OP) {
            char nm[32];
            kn_rc_name(c, i, nm, sizeof nm);
            kn_remit(&c->o, "%*s(void)%s;\n", indent, "", nm);
        }
}

/* An accumulator's value from its sum or max s<i> (the mean divides by the row length). */
void kn_rc_acc_value(kn_rc *c, int i, int indent) {
    const kn_kx *x = &c->k->x[i];
    const char *t = kn_rc_ctype(x->dtype);
    if (x->op == KN_OP_MEAN)
        kn_remit(&c->o, "%*sconst %s a%d = (%s)(s%d / (double)%lld);\n", indent, "", t, i, t, i, (long long)c->k->inner_n);
    else kn_remit(&c->o, "%*sconst %s a%d = (%s)s%d;\n", indent, "", t, i, t, i);
    c->done[i] = true;
    for (int j = 0; j < c->k->nx; j++) kn_rc_define(c, j, false, indent);
}

kn_status kn_render_c(const kn_kernel *k, char **src, size_t *len, size_t *cap) {
    if (k && k->ncolsums) /* a CPU schedule keeps column sums library steps (kn_schedule_opts) */
        return kn_error(KN_ERR_UNSUPPORTED, "kn_render_c: %s has column sums, which only the CUDA renderer writes", k->name);
    kn_rc c;
    KN_TRY(kn_rc_init(&c, k, src, len, cap));
    kn_rout *o = &c.o;
    kn_remit(o, "/* %s: %lld rows x %lld */\nvoid %s(void *ctx, int64_t lo, int64_t hi)\n{\n", k->name,
             (long long)k->outer_n, (long long)k->inner_n, k->name);
    kn_remit(o, "    void *const *B = (void *const *)ctx;\n");
    for (int b = 0; b < k->nbufs; b++)
        kn_remit(o, "    %s%s *%sp%d = (%s%s *)B[%d];\n", k->bufs[b].store ? "" : "const ", kn_rc_stype(k->bufs[b].dtype),
                 k->bufs[b].aliased ? "" : "restrict ", b, k->bufs[b].store ? "" : "const ",
                 kn_rc_stype(k->bufs[b].dtype), b);
    kn_remit(o, "    for (int64_t o = lo; o < hi; o++) {\n");
    kn_rc_row_setup(&c, 8);
    for (int i = 0; i < k->nx; i++) {
        const kn_kx *x = &k->x[i];
        if (x->kind != KN_KX_ACC) continue;
        bool is_max = x->op == KN_OP_MAX;
        const char *at = is_max ? kn_rc_ctype(x->dtype) : "double";
        const char *ninf = strcmp(at, "float") == 0 ? "-INFINITY" : "-(double)INFINITY";
        bool lanes = k->inner_n >= 2 * KN_LANES;
        char nm[48];
        bool rb = k->inner_n <= KN_ROW_BUFFER && k->x[x->in[0]].full && k->x[x->in[0]].kind != KN_KX_LOAD;
        if (rb) {
            /* A row buffer: the values are computed in a loop the compiler vectorizes, and
             * the later loops over this row read them back instead of recomputing. */
            kn_remit(o, "        %s rb%d[%lld];\n", kn_rc_ctype(k->x[x->in[0]].dtype), i, (long long)k->inner_n);
            open_inner(&c, 8);
            kn_rc_define(&c, x->in[0], true, 12);
            kn_rc_name(&c, x->in[0], nm, sizeof nm);
            kn_remit(o, "            rb%d[r] = %s;\n        }\n", i, nm);
            kn_rc_close_scope(&c);
            c.cached[x->in[0]] = i;
            snprintf(nm, sizeof nm, "rb%d[r]", i);
        }
        if (!lanes) { /* a short row: one accumulator, in order */
            kn_remit(o, "        %s s%d = %s;\n", at, i, is_max ? ninf : "0");
            if (rb) kn_remit(o, "        for (int64_t r = 0; r < %lld; r++) {\n", (long long)k->inner_n);
            else {
                open_inner(&c, 8);
                kn_rc_define(&c, x->in[0], true, 12);
                kn_rc_name(&c, x->in[0], nm, sizeof nm);
            }
            if (is_max) kn_remit(o, "            if (%s > s%d || %s != %s) s%d = %s;\n", nm, i, nm, nm, i, nm);
            else kn_remit(o, "            s%d += %s;\n", i, nm);
            kn_remit(o, "        }\n");
            kn_rc_close_scope(&c);
        } else {
            /* A long row: KN_LANES accumulators, element r into lane r % KN_LANES, combined
             * in a fixed order. The lanes are independent, so the sum (in double) and the
             * NaN-propagating maximum run as vector instructions instead of one dependent
             * add or compare per element; the order depends only on the row length, never
             * on the thread count. (Not the interpreter's order: equal within rounding.) */
            int64_t n = k->inner_n, n8 = n / KN_LANES * KN_LANES;
            kn_remit(o, "        %s l%d[%d];\n", at, i, KN_LANES);
            if (is_max) kn_remit(o, "        int n%d[%d];\n", i, KN_LANES); /* a NaN seen, per lane */
            kn_remit(o, "        for (int l = 0; l < %d; l++) l%d[l] = %s;\n", KN_LANES, i, is_max ? ninf : "0");
            if (is_max) kn_remit(o, "        for (int l = 0; l < %d; l++) n%d[l] = 0;\n", KN_LANES, i);
            for (int part = 0; part < 2; part++) {
                if (part == 0)
                    kn_remit(o, "        for (int64_t r%d = 0; r%d < %lld; r%d += %d) {\n"
                                "#pragma omp simd\n"
                                "            for (int l = 0; l < %d; l++) {\n"
                                "                const int64_t r = r%d + l;\n",
                             i, i, (long long)n8, i, KN_LANES, KN_LANES, i);
                else if (n8 < n)
                    kn_remit(o, "        {\n            for (int64_t r = %lld; r < %lld; r++) {\n"
                                "                const int l = (int)(r - %lld);\n",
                             (long long)n8, (long long)n, (long long)n8);
                else break;
                if (!rb) {
                    kn_rc_inner_coords(&c, 16);
                    kn_rc_define(&c, x->in[0], true, 16);
                    kn_rc_name(&c, x->in[0], nm, sizeof nm);
                }
                if (is_max) /* a select the compiler turns into a vector max; NaNs counted aside */
                    kn_remit(o, "                const %s v = %s;\n"
                                "                l%d[l] = l%d[l] > v ? l%d[l] : v;\n"
                                "                n%d[l] |= v != v;\n",
                             at, nm, i, i, i, i);
                else kn_remit(o, "                l%d[l] += %s;\n", i, nm);
                kn_remit(o, "            }\n        }\n");
                kn_rc_close_scope(&c);
            }
            if (is_max) { /* the maximum, or NaN when the row holds one (the interpreter's rule) */
                kn_remit(o, "        %s s%d = l%d[0];\n        int m%d = n%d[0];\n", at, i, i, i, i);
                kn_remit(o, "        for (int l = 1; l < %d; l++) { s%d = s%d > l%d[l] ? s%d : l%d[l]; m%d |= n%d[l]; }\n",
                         KN_LANES, i, i, i, i, i, i, i);
                kn_remit(o, "        if (m%d) s%d = (%s)NAN;\n", i, i, at);
            } else {
                kn_remit(o, "        const double s%d = ((l%d[0] + l%d[1]) + (l%d[2] + l%d[3])) + "
                            "((l%d[4] + l%d[5]) + (l%d[6] + l%d[7]));\n",
                         i, i, i, i, i, i, i, i, i);
            }
        }
        kn_rc_acc_value(&c, i, 8);
    }
    bool any_full = false;
    for (int s = 0; s < k->nstores; s++) any_full |= k->x[k->stores[s].src].full;
    if (any_full) {
        open_inner(&c, 8);
        kn_rc_full_stores(&c, 12);
        kn_remit(o, "        }\n");
        kn_rc_close_scope(&c);
    }
    kn_rc_outer_stores(&c, NULL, 8);
    kn_remit(o, "    }\n}\n\n");
    kn_status st = o->st;
    kn_rc_clear(&c);
    return st;
}
