/* infer_comm.c — the shape rules of the collective ops (the "infer" column of ops.def for
 * grad_store, the slab collectives all_reduce_start, reduce_scatter_start, all_gather_start
 * and comm_wait, and the value collectives all_reduce, all_gather, reduce_scatter, send and
 * recv): apart from infer.c because they describe communication, not computation. */
#include <string.h>

#include "ir/ir_impl.h"

#define T(i) kn_type_str(in[i], tb##i, sizeof tb##i)
#define fail kn_infer_fail
#define need_float kn_infer_need_float

/* Collectives (kiln/ir.h): every one defines a 0-d f32 token. grad_store reads an f32
 * gradient and the token before it; the others read a token and name a slab range. */
static bool is_token(const kn_type *t) { return t->dtype == KN_DT_F32 && t->ndim == 0; }

kn_status infer_grad_store(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    (void)n;
    if (in[0]->dtype != KN_DT_F32)
        return fail(msg, msz, KN_ERR_DTYPE, "gradient %s is not f32 (the gradient slab is f32)", T(0));
    if (!is_token(in[1])) return fail(msg, msz, KN_ERR_SHAPE, "operand 1 %s is not a token (f32[])", T(1));
    *out = *in[1];
    return KN_OK;
}

kn_status infer_comm_token(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    if (!is_token(in[0])) return fail(msg, msz, KN_ERR_SHAPE, "operand %s is not a token (f32[])", T(0));
    if (n->attrs.start < 0 || n->attrs.stop <= n->attrs.start)
        return fail(msg, msz, KN_ERR_ARG, "slab range [%lld, %lld) is empty or negative", (long long)n->attrs.start,
                    (long long)n->attrs.stop);
    *out = *in[0];
    return KN_OK;
}

/* all_gather_start %t {start, stop}: the gathered slab range [start, stop), f32. */
kn_status infer_all_gather(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_comm_token(n, in, out, msg, msz));
    *out = (kn_type){KN_DT_F32, 1, {n->attrs.stop - n->attrs.start}};
    return KN_OK;
}

/* comm_wait %h: h's value, complete (a token, or an all_gather's buffer, which the wait
 * gives back: its readers read the wait, so none runs before the data is in). */
kn_status infer_comm_wait(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    if (is_token(in[0])) return infer_comm_token(n, in, out, msg, msz);
    if (in[0]->dtype != KN_DT_F32 || in[0]->ndim != 1 || in[0]->shape[0] != n->attrs.stop - n->attrs.start)
        return fail(msg, msz, KN_ERR_SHAPE, "operand %s is neither a token (f32[]) nor the f32[%lld] an all_gather of "
                    "[%lld, %lld) makes", T(0), (long long)(n->attrs.stop - n->attrs.start), (long long)n->attrs.start,
                    (long long)n->attrs.stop);
    *out = *in[0];
    return KN_OK;
}

/* Value collectives (kiln/ir.h): {mesh, parts} name a mesh axis and its rank count. */
static kn_status check_mesh(const kn_node *n, char *msg, size_t msz) {
    if (n->attrs.mesh < 0 || n->attrs.mesh >= 4 || n->attrs.parts < 1)
        return fail(msg, msz, KN_ERR_ARG, "mesh axis %lld with %lld ranks: the axis must be in [0, 4) and the ranks "
                    ">= 1", (long long)n->attrs.mesh, (long long)n->attrs.parts);
    return KN_OK;
}

kn_status infer_all_reduce(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(check_mesh(n, msg, msz));
    KN_TRY(need_float(in[0], "operand", msg, msz));
    *out = *in[0];
    return KN_OK;
}

static kn_status dim_axis(const kn_node *n, const kn_type *x, int *d, char *msg, size_t msz) {
    char tb0[96];
    const kn_type *const *in = &x;
    KN_TRY(check_mesh(n, msg, msz));
    if (x->ndim < 1 || n->attrs.axis < 0 || n->attrs.axis >= x->ndim)
        return fail(msg, msz, KN_ERR_ARG, "axis %lld is not a dimension of %s", (long long)n->attrs.axis, T(0));
    *d = (int)n->attrs.axis;
    return KN_OK;
}

kn_status infer_gather_dim(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    int d;
    KN_TRY(dim_axis(n, in[0], &d, msg, msz));
    *out = *in[0];
    out->shape[d] *= n->attrs.parts;
    return KN_OK;
}

kn_status infer_scatter_dim(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    int d;
    KN_TRY(dim_axis(n, in[0], &d, msg, msz));
    KN_TRY(need_float(in[0], "operand", msg, msz));
    if (in[0]->shape[d] % n->attrs.parts)
        return fail(msg, msz, KN_ERR_SHAPE, "dimension %d of %s does not cut into %lld equal blocks", d, T(0),
                    (long long)n->attrs.parts);
    *out = *in[0];
    out->shape[d] /= n->attrs.parts;
    return KN_OK;
}

kn_status infer_send(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    (void)in;
    KN_TRY(check_mesh(n, msg, msz));
    if (n->attrs.peer < 0 || n->attrs.peer >= n->attrs.parts)
        return fail(msg, msz, KN_ERR_ARG, "peer %lld is not a rank of the axis's %lld", (long long)n->attrs.peer,
                    (long long)n->attrs.parts);
    *out = (kn_type){KN_DT_F32, 0, {0}};
    return KN_OK;
}

kn_status infer_recv(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_send(n, in, out, msg, msz));
    kn_type t = {n->attrs.dtype, n->attrs.nshape, {0}};
    for (int i = 0; i < n->attrs.nshape; i++) {
        if (n->attrs.shape[i] < 0) return fail(msg, msz, KN_ERR_SHAPE, "recv: dimension %d is negative", i);
        t.shape[i] = n->attrs.shape[i];
    }
    *out = t;
    return KN_OK;
}

