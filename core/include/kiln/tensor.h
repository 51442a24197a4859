/* kiln/tensor.h — n-dimensional arrays: refcounted storage tagged with its device, and
 * views (shape, strides, offset) over it; the CPU reference kernels.
 *
 * A kn_tensor is a small heap object that owns one reference to its kn_storage. Views
 * (reshape/view, permute, transpose, slice, expand, squeeze, unsqueeze) make a new
 * kn_tensor over the same storage: no bytes are copied. Strides and offsets are counted in
 * elements, not bytes. A stride of 0 repeats an element (broadcasting).
 *
 * Every function that can fail returns a kn_status and writes its result through an out
 * pointer, which is set only on success (it is left untouched on failure). Bad input —
 * NULL pointers, mismatched shapes, a wrong dtype, an axis out of range, a tensor on the
 * wrong device — returns an error whose message (kn_last_error()) names the function, the
 * shapes and dtypes involved, and what was expected. Nothing here aborts on bad input.
 *
 * Axes may be negative, counting from the end (-1 is the last axis), as in NumPy.
 *
 * Which status for which mistake (the same in every function here):
 *   KN_ERR_ARG     a NULL pointer; ndim outside [0, KN_MAX_DIMS]; an op outside its enum; an
 *                  element index out of range (get/set, embedding); a slice step < 1;
 *   KN_ERR_SHAPE   a negative size; numel (or its bytes) overflowing int64; shapes that do
 *                  not broadcast or do not match; squeezing an axis whose size is not 1;
 *   KN_ERR_DTYPE   an invalid dtype, or one the operation does not take;
 *   KN_ERR_AXIS    an axis out of range, or repeated (permute, reduce);
 *   KN_ERR_DEVICE  a tensor that is not on the CPU given to a CPU kernel (every function
 *                  below that reads or writes elements; views and kn_tensor_to work on any
 *                  device), or a device that is unusable (no GPU, bad index, driver error);
 *   KN_ERR_UNSUPPORTED  a device whose backend is not built in ("built without CUDA");
 *   KN_ERR_OOM     an allocation failed (kn_alloc_fail_after reaches every one of them);
 *   KN_ERR_NOT_IMPLEMENTED  a lab 01 unit below is still the skeleton.
 * Device backends and the byte-level kn_device_* functions are in kiln/device.h.
 *
 * Numerics of the CPU kernels: NaN propagates through max/min (binary and reduce); argmax
 * counts NaN as the largest value; integer results are computed in double and stored with
 * kn_dtype_store (truncation toward zero, saturation); arithmetic on two bool tensors is
 * KN_ERR_DTYPE (compare them, or cast first). */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include "kiln/base.h"
#include "kiln/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_MAX_DIMS 8

/* ---------------------------------------------------------------- devices and storage */

/* kn_device, kn_device_type, KN_CPU: kiln/storage.h. */

typedef struct kn_storage {
    int refcount;     /* tensors (views) holding it; freed at 0 */
    kn_device device; /* where data lives */
    size_t nbytes;
    void *data;       /* device pointer for CUDA storage */
    bool owns_data;   /* false for storage wrapping memory kiln does not own */
} kn_storage;

typedef struct kn_tensor {
    kn_storage *storage;          /* one reference owned by this tensor */
    kn_dtype dtype;
    int ndim;                     /* 0 for a scalar */
    int64_t shape[KN_MAX_DIMS];
    int64_t strides[KN_MAX_DIMS]; /* in elements; may be 0 (broadcast) */
    int64_t offset;               /* first element, in elements from storage->data */
} kn_tensor;

/* ---------------------------------------------------------------- creation and lifetime */

kn_status kn_tensor_empty(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape);
kn_status kn_tensor_empty_on(kn_tensor **out, kn_device dev, kn_dtype dt, int ndim, const int64_t *shape);
/* A contiguous tensor over memory kiln does not own (data, on dev; it must outlive the
 * tensor and its views): a compiled program's memory plan places values in one arena. */
kn_status kn_tensor_wrap(kn_tensor **out, kn_device dev, void *data, kn_dtype dt, int ndim, const int64_t *shape);
kn_status kn_tensor_zeros(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape);
kn_status kn_tensor_full(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, double value);
kn_status kn_tensor_scalar(kn_tensor **out, kn_dtype dt, double value); /* ndim 0 */
/* A contiguous copy of `data`, which holds numel elements of dtype dt. */
kn_status kn_tensor_from_data(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, const void *data);
/* A contiguous copy of `data` given as doubles, converted to dt. */
kn_status kn_tensor_from_f64(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, const double *data);
/* 1-D [start, start+step, ...) below stop (above for a negative step). */
kn_status kn_tensor_arange(kn_tensor **out, kn_dtype dt, double start, double stop, double step);
/* Random tensors from a Philox stream (advances the rng by numel or 2*numel words). */
kn_status kn_tensor_rand(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, kn_rng *rng);
kn_status kn_tensor_randn(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, kn_rng *rng);
/* Release a tensor (and its storage when this was the last reference). NULL is fine. */
void kn_tensor_free(kn_tensor *t);

/* ---------------------------------------------------------------- inspection */

int64_t kn_tensor_numel(const kn_tensor *t);
bool kn_tensor_is_contiguous(const kn_tensor *t); /* row-major, no gaps */
/* Pointer to the first element (storage data + offset * element size). */
void *kn_tensor_data(const kn_tensor *t);
/* Read/write one element by multi-index (ndim entries, negative allowed). CPU only. */
kn_status kn_tensor_get(const kn_tensor *t, const int64_t *index, double *out);
kn_status kn_tensor_set(kn_tensor *t, const int64_t *index, double value);
/* The single element of a 1-element tensor. */
kn_status kn_tensor_item(const kn_tensor *t, double *out);
/* The same for a tensor on any device: a device's element is copied to the host first
 * (which waits for the work queued before it: a training step's loss, read). */
kn_status kn_tensor_item_any(const kn_tensor *t, double *out);
/* Contiguous row-major copy of all elements as doubles into out[numel]. */
kn_status kn_tensor_to_f64(const kn_tensor *t, double *out);
/* "[2,3,4]" into buf (always NUL-terminated); returns buf, for error messages. */
const char *kn_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
/* "f32[2,3,4]" — dtype and shape of a tensor ("f32[2,3]@cuda:0" off the CPU). */
const char *kn_tensor_str(const kn_tensor *t, char *buf, size_t size);
/* Print a small tensor (NumPy-like, elided past `max_items` per axis) to f. */
void kn_tensor_print(FILE *f, const kn_tensor *t, int max_items);
/* Normalize an axis in [-ndim, ndim) to [0, ndim); KN_ERR_AXIS naming fn otherwise. */
kn_status kn_axis_normalize(const char *fn, int axis, int ndim, int *out);

/* ---------------------------------------------------------------- views (no copies) */

/* A view with a new shape (one entry may be -1). KN_ERR_SHAPE when the element counts
 * differ, or when the strides of x cannot express the new shape without a copy. */
kn_status kn_tensor_view(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape);
/* Like view, but copies (contiguous) when a view is impossible. */
kn_status kn_tensor_reshape(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape);
/* perm is a permutation of 0..ndim-1 (negative allowed). */
kn_status kn_tensor_permute(kn_tensor **out, const kn_tensor *x, const int *perm);
kn_status kn_tensor_transpose(kn_tensor **out, const kn_tensor *x, int axis0, int axis1);
/* Elements start, start+step, ... below stop along axis. start/stop may be negative
 * (from the end) and are clamped to the axis as in Python; step >= 1. */
kn_status kn_tensor_slice(kn_tensor **out, const kn_tensor *x, int axis, int64_t start, int64_t stop, int64_t step);
kn_status kn_tensor_squeeze(kn_tensor **out, const kn_tensor *x, int axis);   /* size-1 axis */
kn_status kn_tensor_unsqueeze(kn_tensor **out, const kn_tensor *x, int axis); /* axis in [-(ndim+1), ndim] */
/* A new reference to x's storage with x's view (a cheap "copy" of the handle). */
kn_status kn_tensor_alias(kn_tensor **out, const kn_tensor *x);

/* ---------------------------------------------------------------- copies */

/* x itself (as an alias) when contiguous, else a contiguous copy. */
kn_status kn_tensor_contiguous(kn_tensor **out, const kn_tensor *x);
kn_status kn_tensor_clone(kn_tensor **out, const kn_tensor *x);        /* always a copy */
kn_status kn_tensor_cast(kn_tensor **out, const kn_tensor *x, kn_dtype dt);
/* A copy on another device (an alias when already there). */
kn_status kn_tensor_to(kn_tensor **out, const kn_tensor *x, kn_device dev);

/* ---------------------------------------------------------------- elementwise */

/* The pointwise functions: one per row of kiln/pointwise.def (ORDER UNARY), where each
 * one's math, gradient and IR op are written. */
typedef enum kn_unary_op {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) KN_UNARY_##E,
#include "kiln/pointwise.def"
    KN_UNARY_COUNT
} kn_unary_op;

/* ORDER BINARY: the table in core/tensor/elementwise.c follows this order.
 * Comparisons give KN_DT_BOOL; the others give the promoted dtype of a and b. */
typedef enum kn_binary_op {
    KN_BINARY_ADD = 0, KN_BINARY_SUB, KN_BINARY_MUL, KN_BINARY_DIV, KN_BINARY_POW,
    KN_BINARY_MAX, KN_BINARY_MIN,
    KN_BINARY_EQ, KN_BINARY_NE, KN_BINARY_LT, KN_BINARY_LE, KN_BINARY_GT, KN_BINARY_GE,
    KN_BINARY_COUNT
} kn_binary_op;

const char *kn_unary_op_name(kn_unary_op op);
const char *kn_binary_op_name(kn_binary_op op);

/* Unary ops need a float dtype except the rows of dtype ANY (neg, abs, square, relu: any
 * dtype but bool). */
kn_status kn_tensor_unary(kn_tensor **out, kn_unary_op op, const kn_tensor *x);
/* a and b broadcast (NumPy rules, through kn_shape_broadcast). */
kn_status kn_tensor_binary(kn_tensor **out, kn_binary_op op, const kn_tensor *a, const kn_tensor *b);
/* x op s, with s converted to x's dtype. */
kn_status kn_tensor_binary_scalar(kn_tensor **out, kn_binary_op op, const kn_tensor *x, double s);
/* cond ? a : b elementwise; cond is bool; all three broadcast; the result has the
 * promoted dtype of a and b. */
kn_status kn_tensor_where(kn_tensor **out, const kn_tensor *cond, const kn_tensor *a, const kn_tensor *b);

/* ---------------------------------------------------------------- reductions and more */

/* ORDER REDUCE */
typedef enum kn_reduce_op { KN_REDUCE_SUM = 0, KN_REDUCE_MEAN, KN_REDUCE_MAX, KN_REDUCE_MIN, KN_REDUCE_PROD, KN_REDUCE_COUNT } kn_reduce_op;
const char *kn_reduce_op_name(kn_reduce_op op);

/* Index of the maximum along one axis (the first on ties), as i64. */
kn_status kn_tensor_argmax(kn_tensor **out, const kn_tensor *x, int axis, bool keepdim);
/* Batched matrix product: a [..., m, k] @ b [..., k, n] -> [..., m, n]; the batch dims
 * broadcast. Both need ndim >= 2 and the same float dtype. Accumulates in f64 for f64,
 * f32 otherwise. */
kn_status kn_tensor_matmul(kn_tensor **out, const kn_tensor *a, const kn_tensor *b);
/* Numerically stable softmax / log-softmax along an axis (float dtypes). */
kn_status kn_tensor_softmax(kn_tensor **out, const kn_tensor *x, int axis);
kn_status kn_tensor_log_softmax(kn_tensor **out, const kn_tensor *x, int axis);
/* Rows of weight [V, D] picked by integer indices idx [...] -> [..., D]; an index out of
 * [0, V) is KN_ERR_ARG naming it. */
kn_status kn_tensor_embedding(kn_tensor **out, const kn_tensor *weight, const kn_tensor *idx);
/* Join n tensors along an axis (same dtype, same shape elsewhere). */
kn_status kn_tensor_cat(kn_tensor **out, int n, const kn_tensor *const *xs, int axis);
/* Largest |a - b| and largest |a - b| / max(|b|, tiny) over all elements (shapes must be
 * equal); for tests and reference comparisons. */
kn_status kn_tensor_max_diff(const kn_tensor *a, const kn_tensor *b, double *abs_err, double *rel_err);

/* ---------------------------------------------------------------- lab 01 units
 * Declared here, used by the kernels above, written by students in labs/lab01-tensors/
 * (the staff's reference is compiled in: PRIOR=staff). */

/* NumPy broadcasting of two shapes: align from the right; sizes must be equal or one of
 * them 1. KN_ERR_SHAPE naming both shapes when they do not broadcast. */
kn_status kn_shape_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* A view of x broadcast to shape (stride 0 on new or size-1 axes). No copy. KN_ERR_SHAPE
 * when x's shape does not broadcast to it. */
kn_status kn_tensor_expand(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape);
/* Advance a row-major multi-index over shape (last axis fastest). Returns false (and
 * resets index to all zeros) after the last index; true otherwise. */
bool kn_index_next(int ndim, const int64_t *shape, int64_t *index);
/* Copy src into dst element by element, any strides on both sides, converting dtypes.
 * Shapes must be equal (KN_ERR_SHAPE otherwise). */
kn_status kn_tensor_copy_into(kn_tensor *dst, const kn_tensor *src);
/* Reduce over the given axes (naxes == 0: all axes). keepdim keeps them as size 1.
 * Sum/mean/prod accumulate in f64; mean of integers is an f32 result; max/min of an
 * empty reduction is KN_ERR_SHAPE. Output dtype: x's dtype (f32 for integer mean). */
kn_status kn_tensor_reduce(kn_tensor **out, kn_reduce_op op, const kn_tensor *x, int naxes, const int *axes, bool keepdim);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TENSOR_H */
