/* hidden_ref.h — the naive fp64 reference and random-case generators of lab 01's hidden
 * tests (tests/lab01/hidden_ref.c).
 *
 * Everything here is written by hand from the definitions, never through the lab 01 units
 * under test (kn_shape_broadcast, kn_tensor_expand, kn_index_next, kn_tensor_copy_into,
 * kn_tensor_reduce) nor through core code built on them: an element is read as
 *     storage[offset + sum_k index[k] * strides[k]]
 * with kn_dtype_load, multi-indices come from dividing a linear counter, and random views
 * are built by writing shape/strides/offset into an alias of a flat buffer. So a wrong unit
 * can never make its own reference agree with it.
 *
 * Every helper that can fail a test does so with cr_assert and a message naming what it was
 * doing; none of them touches an output before the status that produced it was checked. */
#ifndef KILN_TESTS_LAB01_HIDDEN_REF_H
#define KILN_TESTS_LAB01_HIDDEN_REF_H

#include "kn_test.h"
#include "kiln/tensor.h"

/* Each random test keeps its tensors below this many elements, so hundreds of cases per
 * test stay well under a second, also under ASan. */
#define HREF_MAX_NUMEL 240

/* How random values are drawn: any value of the dtype's test range, or values near 1 (so
 * products neither vanish nor overflow too fast). */
typedef enum href_values { HREF_VALUES_ANY = 0, HREF_VALUES_NEAR_ONE } href_values;

extern const kn_dtype href_all_dtypes[KN_DT_COUNT];

int64_t href_numel(int ndim, const int64_t *shape);
/* The row-major multi-index of linear position lin (last axis fastest). */
void href_unravel(int64_t lin, int ndim, const int64_t *shape, int64_t *idx);
/* Element idx of t as a double, by hand from strides and offset. */
double href_at(const kn_tensor *t, const int64_t *idx);
/* x as stored in dt and read back (kn_dtype_store's rounding, truncation, saturation). */
double href_roundtrip(kn_dtype dt, double x);
/* Relative precision of a dtype: 2^-(mantissa bits); 0 for integers and bool. */
double href_eps(kn_dtype dt);
/* got == want within tol; NaN matches NaN, an infinity only itself. */
bool href_close(double got, double want, double tol);

int64_t href_randint(kn_rng *r, int64_t lo, int64_t hi); /* uniform in [lo, hi] */
/* A random shape of up to max_ndim axes, sizes 1..4 (0 now and then when allow_zero), at
 * most HREF_MAX_NUMEL elements. Returns ndim. */
int href_rand_shape(kn_rng *r, int max_ndim, bool allow_zero, int64_t *shape);
void href_rand_perm(kn_rng *r, int n, int *perm);

/* A tensor of logical shape `shape` whose layout is random: its axes are stored in a random
 * order, with steps (a slice with step 2 or 3), gaps between rows, a random offset, and
 * (when allow_bcast) axes of stride 0. Every element of the flat storage, viewed or not,
 * holds a random value of dt. Caller kn_tensor_free()s it. */
kn_tensor *href_rand_layout(kn_rng *r, kn_dtype dt, int ndim, const int64_t *shape,
                            bool allow_bcast, href_values values);

/* Assert that t has dtype dt and shape [ndim]shape, saying what `what` produced. */
void href_expect_shape(const kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape,
                       const char *what);

/* "[2,3,4]" into buf. */
const char *href_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

#endif /* KILN_TESTS_LAB01_HIDDEN_REF_H */
