/* op.c — the op and attribute tables, generated from ops.def, and attribute helpers.
 *
 * kn_op_get(op) gives what every pass needs to know about an op without a switch: its
 * text name, arity, category, the attributes it takes and whether it is differentiable.
 * The per-op functions of the IR (shape rule, kernel, cost) sit in kn_op_impls, in the
 * same order (ORDER OP); the backward column is autograd's (core/autograd/rule_check.c
 * compiles it), of which the IR keeps only whether an op has a rule. Attributes are a fixed struct (kn_attrs); the table here maps an
 * attribute id to its name, kind and field so the printer and parser handle them all in
 * one loop. */
#include <math.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/scalar.h"

/* KN_IS_BW_NONE(f) is 1 when the token f is bw_none and 0 otherwise, at preprocessing time
 * (the "probe" idiom: only bw_none expands to two arguments), so the table stays a
 * constant initializer. */
#define KN_PROBE_bw_none ~, 1
#define KN_SECOND(a, b, ...) b
#define KN_SECOND_(...) KN_SECOND(__VA_ARGS__)
#define KN_IS_BW_NONE(f) KN_SECOND_(KN_PROBE_##f, 0, ~)

static const kn_op_info kn_op_infos[KN_OP_COUNT] = {
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) \
    {name, arity, KN_CAT_##cat, req, opt, !KN_IS_BW_NONE(backward)},
#include "kiln/ops.def"
};

const kn_op_impl kn_op_impls[KN_OP_COUNT] = {
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) {infer, kernel, cost},
#include "kiln/ops.def"
};

const kn_attr_meta kn_attr_metas[KN_ATTR_COUNT] = {
#define KN_ATTR(E, name, kind, dflt) {name, KN_AK_##kind},
#include "kiln/ops.def"
};

static const char *const kn_cat_names[KN_CAT_COUNT] = {
    "source", "elementwise", "reduction", "matmul", "view", "movement", "other", "collective"};

const kn_op_info *kn_op_get(kn_op op) {
    return (unsigned)op < KN_OP_COUNT ? &kn_op_infos[op] : NULL;
}

/* An op belongs here only when every backend's kernel for it (the CPU's in core/tensor/,
 * eval_low_precision's widening path, the CUDA kernel) is correct with out == in[k]: each
 * output element is written after every read of the elements that still need the input
 * (a row kernel finishes its row's statistics before it writes any of the row, and reads
 * no other row), and no pointer of the two is `restrict`. Tested in tests/core/
 * test_inplace.c and test_cuda_inplace.c.
 *   cross_entropy_bwd(dloss, logits, targets): the logits (operand 1). The CPU kernel
 *   reads a row for its logsumexp, then writes each element right after reading it; the
 *   CUDA kernel (cuda_cross_entropy.cu, knc_ce_bwd_rows_inplace) is a block per row that takes the
 *   row's statistics through __syncthreads before its first store. */
int kn_op_inplace_operand(kn_op op) {
    return op == KN_OP_CROSS_ENTROPY_BWD ? 1 : -1;
}

const char *kn_op_name(kn_op op) { return (unsigned)op < KN_OP_COUNT ? kn_op_infos[op].name : "?"; }

kn_op kn_op_from_name(const char *name, size_t len) {
    for (int i = 0; i < KN_OP_COUNT; i++)
        if (strlen(kn_op_infos[i].name) == len && !memcmp(kn_op_infos[i].name, name, len)) return (kn_op)i;
    return KN_OP_COUNT;
}

/* The IR op of each row of kiln/pointwise.def (KN_OP_COUNT: the library's only), and back:
 * both generated from the table, so the IR's "exp" is the tensor library's "exp". */
#define KN_PW_OP_IR(rule) 1
#define KN_PW_OP_LIB 0
#define KN_PW_OP_OF(E, ir) KN_PW_OP_OF_(E, KN_PW_OP_##ir)
#define KN_PW_OP_OF_(E, isop) KN_PW_OP_OF__(E, isop)
#define KN_PW_OP_OF__(E, isop) KN_PW_OP_OF_##isop(E)
#define KN_PW_OP_OF_1(E) KN_OP_##E
#define KN_PW_OP_OF_0(E) KN_OP_COUNT
static const kn_op kn_unary_ops[KN_UNARY_COUNT] = {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) KN_PW_OP_OF(E, ir),
#include "kiln/pointwise.def"
};

kn_op kn_unary_ir_op(kn_unary_op f) { return (unsigned)f < KN_UNARY_COUNT ? kn_unary_ops[f] : KN_OP_COUNT; }

bool kn_op_unary(kn_op op, kn_unary_op *out) {
    for (int i = 0; i < KN_UNARY_COUNT; i++)
        if (kn_unary_ops[i] == op && op != KN_OP_COUNT) {
            if (out) *out = (kn_unary_op)i;
            return true;
        }
    return false;
}

/* The elementwise ops of arity 2 that are kn_binary_ops, and the reductions: -1 for every
 * other op (a new binary or reduction op adds its pair here). */
static int op_binary(kn_op op) {
    static const struct { kn_op op; kn_binary_op b; } map[] = {
        {KN_OP_ADD, KN_BINARY_ADD}, {KN_OP_SUB, KN_BINARY_SUB}, {KN_OP_MUL, KN_BINARY_MUL},
        {KN_OP_DIV, KN_BINARY_DIV}, {KN_OP_EQ, KN_BINARY_EQ}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].op == op) return (int)map[i].b;
    return -1;
}
static int op_reduce(kn_op op) {
    static const struct { kn_op op; kn_reduce_op r; } map[] = {
        {KN_OP_SUM, KN_REDUCE_SUM}, {KN_OP_MEAN, KN_REDUCE_MEAN}, {KN_OP_MAX, KN_REDUCE_MAX}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].op == op) return (int)map[i].r;
    return -1;
}
bool kn_op_binary(kn_op op, kn_binary_op *out) {
    int i = op_binary(op);
    if (i >= 0 && out) *out = (kn_binary_op)i;
    return i >= 0;
}
bool kn_op_reduce(kn_op op, kn_reduce_op *out) {
    int i = op_reduce(op);
    if (i >= 0 && out) *out = (kn_reduce_op)i;
    return i >= 0;
}

const char *kn_attr_name(kn_attr_id a) { return (unsigned)a < KN_ATTR_COUNT ? kn_attr_metas[a].name : "?"; }

const char *kn_op_category_name(kn_op_category c) {
    return (unsigned)c < KN_CAT_COUNT ? kn_cat_names[c] : "?";
}

int64_t *kn_attr_int(kn_attrs *a, kn_attr_id id) {
    switch (id) {
    case KN_ATTR_AXIS: return &a->axis;
    case KN_ATTR_KEEPDIM: return &a->keepdim;
    case KN_ATTR_START: return &a->start;
    case KN_ATTR_STOP: return &a->stop;
    case KN_ATTR_STEP: return &a->step;
    case KN_ATTR_TA: return &a->ta;
    case KN_ATTR_TB: return &a->tb;
    case KN_ATTR_SEED: return &a->seed;
    case KN_ATTR_OFFSET: return &a->offset;
    case KN_ATTR_MESH: return &a->mesh;
    case KN_ATTR_PARTS: return &a->parts;
    case KN_ATTR_PEER: return &a->peer;
    case KN_ATTR_AXES: case KN_ATTR_PERM: case KN_ATTR_SHAPE: case KN_ATTR_EPS: case KN_ATTR_P: case KN_ATTR_VALUE: case KN_ATTR_SCALE: case KN_ATTR_DTYPE: case KN_ATTR_NAME: case KN_ATTR_FN: case KN_ATTR_COUNT: return NULL; /* not an INT attribute */
    }
    return NULL;
}

double *kn_attr_f64(kn_attrs *a, kn_attr_id id) {
    switch (id) {
    case KN_ATTR_EPS: return &a->eps;
    case KN_ATTR_P: return &a->p;
    case KN_ATTR_VALUE: return &a->value;
    case KN_ATTR_SCALE: return &a->scale;
    case KN_ATTR_AXES: case KN_ATTR_PERM: case KN_ATTR_SHAPE: case KN_ATTR_AXIS: case KN_ATTR_KEEPDIM: case KN_ATTR_START: case KN_ATTR_STOP: case KN_ATTR_STEP: case KN_ATTR_TA: case KN_ATTR_TB: case KN_ATTR_SEED: case KN_ATTR_OFFSET: case KN_ATTR_MESH: case KN_ATTR_PARTS: case KN_ATTR_PEER: case KN_ATTR_DTYPE: case KN_ATTR_NAME: case KN_ATTR_FN: case KN_ATTR_COUNT: return NULL; /* not an F64 attribute */
    }
    return NULL;
}

int64_t *kn_attr_ints(kn_attrs *a, kn_attr_id id, int **count) {
    switch (id) {
    case KN_ATTR_AXES: *count = &a->naxes; return a->axes;
    case KN_ATTR_PERM: *count = &a->nperm; return a->perm;
    case KN_ATTR_SHAPE: *count = &a->nshape; return a->shape;
    case KN_ATTR_AXIS: case KN_ATTR_KEEPDIM: case KN_ATTR_START: case KN_ATTR_STOP: case KN_ATTR_STEP: case KN_ATTR_TA: case KN_ATTR_TB: case KN_ATTR_SEED: case KN_ATTR_OFFSET: case KN_ATTR_MESH: case KN_ATTR_PARTS: case KN_ATTR_PEER: case KN_ATTR_EPS: case KN_ATTR_P: case KN_ATTR_VALUE: case KN_ATTR_SCALE: case KN_ATTR_DTYPE: case KN_ATTR_NAME: case KN_ATTR_FN: case KN_ATTR_COUNT: *count = NULL; return NULL; /* not an INTS attribute */
    }
    *count = NULL;
    return NULL;
}

kn_attrs kn_attrs_default(void) {
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dtype = KN_DT_F32;
#define KN_ATTR(E, name, kind, dflt)                                          \
    if (KN_AK_##kind == KN_AK_INT) *kn_attr_int(&a, KN_ATTR_##E) = (int64_t)(dflt); \
    if (KN_AK_##kind == KN_AK_F64) *kn_attr_f64(&a, KN_ATTR_##E) = (double)(dflt); \
    if (KN_AK_##kind == KN_AK_FN) a.fn = (int32_t)(dflt);
#include "kiln/ops.def"
    return a;
}

bool kn_attr_is_default(const kn_attrs *a, kn_attr_id id) {
    kn_attrs d = kn_attrs_default(), *m = (kn_attrs *)a;
    switch (kn_attr_metas[id].kind) {
    case KN_AK_INT: return *kn_attr_int(m, id) == *kn_attr_int(&d, id);
    case KN_AK_F64: {
        double x = *kn_attr_f64(m, id), y = *kn_attr_f64(&d, id);
        return x == y && signbit(x) == signbit(y);
    }
    case KN_AK_INTS: { int *c = NULL; kn_attr_ints(m, id, &c); return !c || *c == 0; }
    case KN_AK_DTYPE: return a->dtype == d.dtype;
    case KN_AK_STR: return a->name[0] == '\0';
    case KN_AK_FN: return a->fn == d.fn;
    }
    return true;
}

kn_status kn_node_check_attrs(const kn_node *n, char *msg, size_t msz) {
    const kn_op_info *info = kn_op_get(n->op);
    const kn_attrs *a = &n->attrs;
    if (!info) { snprintf(msg, msz, "invalid op %d", (int)n->op); return KN_ERR_ARG; }
    for (int i = 0; i < KN_ATTR_COUNT; i++) {
        uint32_t bit = 1u << i;
        if (!((info->req_attrs | info->opt_attrs) & bit) && !kn_attr_is_default(a, (kn_attr_id)i)) {
            snprintf(msg, msz, "attribute '%s' is not one %s takes", kn_attr_metas[i].name, info->name);
            return KN_ERR_ARG;
        }
    }
    if (a->naxes < 0 || a->naxes > KN_MAX_DIMS || a->nperm < 0 || a->nperm > KN_MAX_DIMS ||
        a->nshape < 0 || a->nshape > KN_MAX_DIMS) {
        snprintf(msg, msz, "an integer list attribute has more than %d entries", KN_MAX_DIMS);
        return KN_ERR_ARG;
    }
    if ((a->keepdim != 0 && a->keepdim != 1) || (a->ta != 0 && a->ta != 1) || (a->tb != 0 && a->tb != 1)) {
        snprintf(msg, msz, "keepdim, ta and tb must be 0 or 1");
        return KN_ERR_ARG;
    }
    if (a->step < 1) { snprintf(msg, msz, "step %lld must be >= 1", (long long)a->step); return KN_ERR_ARG; }
    if (!(a->eps > 0) || !isfinite(a->eps)) { snprintf(msg, msz, "eps %g must be positive and finite", a->eps); return KN_ERR_ARG; }
    if (!(a->scale > 0) || !isfinite(a->scale)) {
        snprintf(msg, msz, "scale %g must be positive and finite", a->scale);
        return KN_ERR_ARG;
    }
    if (!(a->p >= 0 && a->p < 1)) { snprintf(msg, msz, "dropout p %g must be in [0, 1)", a->p); return KN_ERR_ARG; }
    if (a->seed < 0 || a->offset < 0) { snprintf(msg, msz, "seed and offset must be >= 0"); return KN_ERR_ARG; }
    if (!kn_dtype_valid(a->dtype)) { snprintf(msg, msz, "invalid dtype %d", (int)a->dtype); return KN_ERR_DTYPE; }
    if (memchr(a->name, '\0', KN_NAME_MAX) == NULL) { snprintf(msg, msz, "name is not terminated"); return KN_ERR_ARG; }
    if ((info->req_attrs & KN_ABIT(FN)) &&
        (a->fn < 0 || a->fn >= KN_UNARY_COUNT || !kn_sc_unary_has_grad((kn_unary_op)a->fn))) {
        snprintf(msg, msz, "%s needs fn, a pointwise function with a gradient (kiln/pointwise.def), not %s",
                 info->name, a->fn >= 0 && a->fn < KN_UNARY_COUNT ? kn_unary_op_name((kn_unary_op)a->fn) : "none");
        return KN_ERR_ARG;
    }
    if ((info->req_attrs & KN_ABIT(NAME)) && a->name[0] == '\0') {
        snprintf(msg, msz, "%s needs a non-empty name", info->name);
        return KN_ERR_ARG;
    }
    for (const char *c = a->name; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) {
            snprintf(msg, msz, "name \"%s\" holds a quote, backslash or control character", a->name);
            return KN_ERR_ARG;
        }
    return KN_OK;
}

/* Sources have no kernel (their tensors are bound). */
kn_status kern_none(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)in; (void)out;
    return kn_error(KN_ERR_ARG, "%s: has no kernel (its tensor is bound by name)", kn_op_name(n->op));
}

/* Collectives are run by the context of the run (kn_collective_eval), never alone. */
kn_status kern_collective(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)in; (void)out;
    return kn_error(KN_ERR_UNSUPPORTED, "%s: a collective runs inside an interpreter or program given a collectives "
                    "context (kn_interp_set_collectives, kn_program_set_collectives), not as a kernel", kn_op_name(n->op));
}

bool kn_op_makes_tensor(kn_op op) {
    return op == KN_OP_ALL_REDUCE || op == KN_OP_ALL_GATHER || op == KN_OP_REDUCE_SCATTER || op == KN_OP_RECV;
}
