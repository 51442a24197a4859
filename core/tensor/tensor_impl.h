/* tensor_impl.h — what the files of core/tensor/ share and nobody else uses.
 *
 * Internal names carry the prefix knt_ (as Lua's luaK_ marks its code generator): they are
 * not part of kiln's API and may change.
 *
 *   - argument checks that every public function runs first, so each error message names
 *     the public function and the offending values;
 *   - knt_view_new: a tensor header sharing x's storage (refcount + 1);
 *   - knt_iter: the row iterator every CPU kernel walks its operands with. It visits the
 *     output shape row by row: the outer axes advance with kn_index_next (a lab 01 unit),
 *     the last axis is an inner loop the kernel writes itself, with one stride per operand.
 *     An iterator also counts the rows it visited, so a kn_index_next that stops early (the
 *     untouched skeleton) turns into an error instead of a silently partial result. */
#ifndef KILN_TENSOR_IMPL_H
#define KILN_TENSOR_IMPL_H

#include "kiln/storage.h"
#include "kiln/tensor.h"

/* Shape/dtype text for messages: "f32[2,3]". Buffers of KNT_STR bytes. */
#define KNT_STR 96

/* KN_ERR_ARG when p is NULL: "fn: what is NULL". */
kn_status knt_check_ptr(const char *fn, const char *what, const void *p);
/* A well-formed tensor: not NULL, has storage, valid dtype and ndim. */
kn_status knt_check_tensor(const char *fn, const char *what, const kn_tensor *t);
/* knt_check_tensor, and the tensor lives on the CPU (KN_ERR_DEVICE otherwise). */
kn_status knt_check_cpu(const char *fn, const char *what, const kn_tensor *t);
/* ndim in [0, KN_MAX_DIMS], shape non-NULL when ndim > 0, sizes >= 0, and numel (and
 * numel * elem_size when elem_size > 0) fit in int64. numel_out may be NULL. */
kn_status knt_check_shape(const char *fn, int ndim, const int64_t *shape, size_t elem_size, int64_t *numel_out);
kn_status knt_check_dtype(const char *fn, kn_dtype dt);

/* Product of sizes (no overflow check: for shapes already checked). */
int64_t knt_numel(int ndim, const int64_t *shape);
/* Row-major contiguous strides of shape. */
void knt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* A new header over x's storage with x's dtype/shape/strides/offset; refcount + 1. */
kn_status knt_view_new(const char *fn, const kn_tensor *x, kn_tensor **out);
/* An uninitialised contiguous CPU tensor (the kernels' outputs). */
kn_status knt_empty(const char *fn, kn_dtype dt, int ndim, const int64_t *shape, kn_tensor **out);

/* Row iterator over up to KNT_MAX_OPS operands that all have (after expansion) the shape
 * being iterated. */
#define KNT_MAX_OPS 4
typedef struct knt_iter {
    int nops;
    int outer_ndim;                           /* ndim - 1 (0 for 0-d and 1-d shapes) */
    int64_t shape[KN_MAX_DIMS];               /* the outer axes */
    int64_t index[KN_MAX_DIMS];               /* current outer index */
    int64_t inner;                            /* length of a row (last axis; 1 for 0-d) */
    int64_t inner_stride[KNT_MAX_OPS];        /* stride of each operand along the row */
    int64_t strides[KNT_MAX_OPS][KN_MAX_DIMS];/* outer strides of each operand */
    int64_t offset[KNT_MAX_OPS];              /* element offset of each operand's view */
    int64_t base[KNT_MAX_OPS];                /* element offset of the current row's start */
    int64_t rows;                             /* rows expected */
    int64_t visited;                          /* rows handed out so far */
} knt_iter;

/* Set up over `shape` (ndim axes); ops[i] must have exactly this shape. The first row is
 * ready when numel > 0 (check with knt_iter_rows). */
void knt_iter_init(knt_iter *it, int ndim, const int64_t *shape, int nops, const kn_tensor *const *ops);
/* Move to the next row; false after the last (or when kn_index_next stops). */
bool knt_iter_next(knt_iter *it);
/* KN_OK when every row was visited; otherwise the kn_index_next failure as an error of fn
 * (KN_ERR_NOT_IMPLEMENTED for the skeleton, KN_ERR_INTERNAL for a wrong unit). */
kn_status knt_iter_finish(const char *fn, const knt_iter *it);
/* The same check for a walk of `total` indices with kn_index_next that stopped after
 * `visited` (call kn_clear_error() before the walk). */
kn_status knt_walk_error(const char *fn, int64_t visited, int64_t total);
/* A header (no reference taken: for reading/writing inside one kernel call only) of x with
 * `axis` moved to the end; the other axes keep their order. */
kn_tensor knt_axis_last(const kn_tensor *x, int axis);

/* Element pointers for typed fast paths. */
#define KNT_PTR(T, t) ((T *)(t)->storage->data)

#endif /* KILN_TENSOR_IMPL_H */
