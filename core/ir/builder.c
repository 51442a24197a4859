/* builder.c — the builder: one API for model code, run eagerly or recorded as a graph.
 *
 * Every call (kn_add, kn_matmul, ...) funnels into kn_builder_op, which checks the
 * operands and attributes, infers the result type with the op's shape rule, appends the
 * node to the builder's graph and, in EAGER mode, runs the node's kernel at once and keeps
 * the tensor. In GRAPH mode nothing runs; kn_builder_finish hands the graph to whoever
 * runs it (the interpreter, or kn_program_compile). Because both modes record the same nodes
 * and call the same kernels, a model function runs eagerly or is captured with identical
 * results.
 *
 * Errors are sticky: the first failure is kept (status + message, also left in
 * kn_last_error) and every later call returns KN_VAL_NONE without doing anything, so
 * model code can chain calls and check once. Invariant: when st == KN_OK, every node of
 * the graph has a valid type, and in eager mode vals[i] holds node i's tensor. */
#include <stdarg.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"

struct kn_builder {
    kn_mode mode;
    kn_graph *g;          /* owned; replaced by an empty one on finish */
    kn_tensor **vals;     /* eager mode: node i's tensor (owned), cap_vals entries */
    int cap_vals;
    kn_status st;         /* first error, sticky */
    char err[512];
    int32_t scope;        /* stamped on every node pushed (kn_builder_set_scope) */
};

kn_status kn_builder_new(kn_builder **out, kn_mode mode) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_builder_new: out is NULL");
    if (mode != KN_MODE_EAGER && mode != KN_MODE_GRAPH) return kn_error(KN_ERR_ARG, "kn_builder_new: invalid mode %d", (int)mode);
    kn_builder *b = kn_calloc(1, sizeof *b);
    if (!b) return kn_error(KN_ERR_OOM, "kn_builder_new: out of memory");
    kn_status st = kn_graph_new(&b->g);
    if (st != KN_OK) { kn_free(b); return st; }
    b->mode = mode;
    b->scope = KN_SCOPE_NONE;
    *out = b;
    return KN_OK;
}

kn_status kn_builder_from_graph(kn_builder **out, const kn_graph *g) {
    if (!out || !g) return kn_error(KN_ERR_ARG, "kn_builder_from_graph: NULL argument");
    kn_builder *b = NULL;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_graph *c = NULL;
    kn_status st = kn_graph_copy(&c, g);
    if (st != KN_OK) { kn_builder_free(b); return st; }
    kn_graph_free(b->g);
    b->g = c;
    *out = b;
    return KN_OK;
}

static void free_vals(kn_builder *b) {
    for (int i = 0; i < b->cap_vals; i++) kn_tensor_free(b->vals[i]);
    kn_free(b->vals);
    b->vals = NULL;
    b->cap_vals = 0;
}

void kn_builder_free(kn_builder *b) {
    if (!b) return;
    free_vals(b);
    kn_graph_free(b->g);
    kn_free(b);
}

kn_mode kn_builder_mode(const kn_builder *b) { return b ? b->mode : KN_MODE_GRAPH; }
kn_status kn_builder_status(const kn_builder *b) { return b ? b->st : KN_ERR_ARG; }
const char *kn_builder_error(const kn_builder *b) { return b ? b->err : "kn_builder_error: builder is NULL"; }
const kn_graph *kn_builder_graph(const kn_builder *b) { return b ? b->g : NULL; }
kn_graph *kn_builder_graph_mut(kn_builder *b) { return b->g; }

void kn_builder_fail(kn_builder *b, kn_status st, const char *fmt, ...) {
    if (!b || b->st != KN_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    b->st = st == KN_OK ? KN_ERR_INTERNAL : st;
    kn_error(b->st, "%s", b->err);
}

static bool val_ok(const kn_builder *b, kn_val v) { return b && v.id >= 0 && v.id < b->g->nnodes; }

const kn_type *kn_val_type(const kn_builder *b, kn_val v) { return val_ok(b, v) ? &b->g->nodes[v.id].type : NULL; }
int kn_val_ndim(const kn_builder *b, kn_val v) { return val_ok(b, v) ? b->g->nodes[v.id].type.ndim : -1; }
int64_t kn_val_dim(const kn_builder *b, kn_val v, int axis) {
    if (!val_ok(b, v)) return -1;
    const kn_type *t = &b->g->nodes[v.id].type;
    if (axis < 0) axis += t->ndim;
    return axis >= 0 && axis < t->ndim ? t->shape[axis] : -1;
}
const kn_tensor *kn_val_tensor(const kn_builder *b, kn_val v) {
    return val_ok(b, v) && b->mode == KN_MODE_EAGER && v.id < b->cap_vals ? b->vals[v.id] : NULL;
}

kn_status kn_ir_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out) {
    if (!t) return kn_error(KN_ERR_ARG, "%s: tensor is NULL", fn);
    if (t->storage->device.type != KN_DEVICE_CPU) { /* its backend's */
        if (!kn_ir_device.contiguous)
            return kn_error(KN_ERR_UNSUPPORTED, "%s: no %s backend in this build", fn,
                            kn_device_type_name(t->storage->device.type));
        return kn_ir_device.contiguous(fn, t, out);
    }
    if (kn_tensor_is_contiguous(t)) return kn_tensor_alias(out, t);
    kn_tensor *c = NULL;
    KN_TRY(kn_tensor_empty(&c, t->dtype, t->ndim, t->shape));
    int64_t st[KN_MAX_DIMS], s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) { st[i] = s; s *= t->shape[i]; }
    kn_k_strided_copy(kn_dtype_size(t->dtype), t->ndim, t->shape, kn_tensor_data(t), t->strides,
                      kn_tensor_data(c), st);
    *out = c;
    return KN_OK;
}

static kn_status grow_vals(kn_builder *b, int need) {
    if (need <= b->cap_vals) return KN_OK;
    int cap = b->cap_vals ? b->cap_vals : 64;
    while (cap < need) cap *= 2;
    kn_tensor **v = kn_realloc(b->vals, (size_t)cap * sizeof *v);
    if (!v) return kn_error(KN_ERR_OOM, "kn_builder: out of memory for %d values", cap);
    memset(v + b->cap_vals, 0, (size_t)(cap - b->cap_vals) * sizeof *v);
    b->vals = v;
    b->cap_vals = cap;
    return KN_OK;
}

/* Append a node the caller checked and typed; in eager mode t (owned, may be NULL in
 * graph mode) becomes the value's tensor. Frees t on failure. */
kn_status kn_builder_push(kn_builder *b, const kn_node *n, kn_tensor *t, int32_t *id) {
    if (!b || !n || !id) {
        kn_tensor_free(t);
        return kn_error(KN_ERR_ARG, "kn_builder_push: NULL argument");
    }
    kn_node stamped = *n;
    stamped.scope = b->scope;
    kn_status st = b->mode == KN_MODE_EAGER ? grow_vals(b, b->g->nnodes + 1) : KN_OK;
    if (st == KN_OK) st = kn_graph_add_node(b->g, &stamped, id);
    if (st != KN_OK) { kn_tensor_free(t); return st; }
    if (b->mode == KN_MODE_EAGER) b->vals[*id] = t;
    else kn_tensor_free(t);
    return KN_OK;
}

kn_val kn_builder_op(kn_builder *b, const char *fn, kn_op op, int nin, const kn_val *in,
                     const kn_attrs *attrs, const kn_type *type) {
    return kn_builder_record(b, fn ? fn : "kn_builder_op", op, nin, in, attrs, type, NULL);
}

int32_t kn_builder_set_scope(kn_builder *b, int32_t scope) {
    if (!b) return KN_SCOPE_NONE;
    int32_t old = b->scope;
    b->scope = scope < 0 ? KN_SCOPE_NONE : scope;
    return old;
}

void kn_builder_output(kn_builder *b, kn_val v) {
    if (!b || b->st != KN_OK) return;
    if (!val_ok(b, v)) { kn_builder_fail(b, KN_ERR_ARG, "kn_builder_output: not a value of this builder (id %d)", (int)v.id); return; }
    kn_status st = kn_graph_add_output(b->g, v.id);
    if (st != KN_OK) kn_builder_fail(b, st, "kn_builder_output: %s", kn_last_error());
}

kn_status kn_builder_finish(kn_builder *b, kn_graph **out) {
    if (!b || !out) return kn_error(KN_ERR_ARG, "kn_builder_finish: NULL argument");
    if (b->st != KN_OK) return kn_error(b->st, "%s", b->err);
    KN_TRY(kn_graph_verify(b->g));
    kn_graph *fresh = NULL;
    KN_TRY(kn_graph_new(&fresh));
    *out = b->g;
    b->g = fresh;
    free_vals(b);
    return KN_OK;
}

/* ---------------------------------------------------------------- sources */

static bool name_ok(kn_builder *b, const char *fn, const char *name) {
    if (!b || b->st != KN_OK) return false;
    if (!name || !name[0] || strlen(name) >= KN_NAME_MAX) {
        kn_builder_fail(b, KN_ERR_ARG, "%s: the name must be 1 to %d characters", fn, KN_NAME_MAX - 1);
        return false;
    }
    return true;
}

static kn_val source(kn_builder *b, const char *fn, kn_op op, const char *name, const kn_type *t, const kn_tensor *data) {
    if (!name_ok(b, fn, name)) return KN_VAL_NONE;
    kn_attrs a = kn_attrs_default();
    memcpy(a.name, name, strlen(name) + 1);
    return kn_builder_record(b, fn, op, 0, NULL, &a, t, data);
}

static bool type_of(kn_builder *b, const char *fn, kn_dtype dt, int ndim, const int64_t *shape, kn_type *t) {
    if (!b || b->st != KN_OK) return false;
    if (ndim < 0 || ndim > KN_MAX_DIMS || (ndim > 0 && !shape)) {
        kn_builder_fail(b, KN_ERR_SHAPE, "%s: rank %d is outside [0, %d] (or shape is NULL)", fn, ndim, KN_MAX_DIMS);
        return false;
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return true;
}

static kn_val source_tensor(kn_builder *b, const char *fn, kn_op op, const char *name, const kn_tensor *x) {
    kn_type t;
    if (!b || b->st != KN_OK) return KN_VAL_NONE;
    if (!x) { kn_builder_fail(b, KN_ERR_ARG, "%s: tensor for \"%s\" is NULL", fn, name ? name : "?"); return KN_VAL_NONE; }
    if (!type_of(b, fn, x->dtype, x->ndim, x->shape, &t)) return KN_VAL_NONE;
    return source(b, fn, op, name, &t, x);
}

kn_val kn_input(kn_builder *b, const char *name, const kn_tensor *t) { return source_tensor(b, "kn_input", KN_OP_INPUT, name, t); }
kn_val kn_param(kn_builder *b, const char *name, const kn_tensor *t) { return source_tensor(b, "kn_param", KN_OP_PARAM, name, t); }

kn_val kn_input_typed(kn_builder *b, const char *name, kn_dtype dt, int ndim, const int64_t *shape) {
    kn_type t;
    return type_of(b, "kn_input_typed", dt, ndim, shape, &t) ? source(b, "kn_input_typed", KN_OP_INPUT, name, &t, NULL) : KN_VAL_NONE;
}
kn_val kn_param_typed(kn_builder *b, const char *name, kn_dtype dt, int ndim, const int64_t *shape) {
    kn_type t;
    return type_of(b, "kn_param_typed", dt, ndim, shape, &t) ? source(b, "kn_param_typed", KN_OP_PARAM, name, &t, NULL) : KN_VAL_NONE;
}

kn_val kn_full(kn_builder *b, kn_dtype dt, int ndim, const int64_t *shape, double value) {
    kn_type t;
    if (!type_of(b, "kn_full", dt, ndim, shape, &t)) return KN_VAL_NONE;
    kn_attrs a = kn_attrs_default();
    a.value = value;
    return kn_builder_record(b, "kn_full", KN_OP_FULL, 0, NULL, &a, &t, NULL);
}

kn_val kn_scalar(kn_builder *b, kn_dtype dt, double value) { return kn_full(b, dt, 0, NULL, value); }
