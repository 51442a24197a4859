/* flash_check.h — helpers for lab 08's tests of the flash attention forward kernel
 * (cuda_flash_fwd.c), public and hidden.
 *
 * l8_flash_check runs your kernel under the CUDA emulator (runtime/cuda_flash.h: the very
 * text nvcc compiles for the GPU, compiled as C) and kiln's CPU reference kernel
 * (core/tensor/kernels_flash.inc, kn_k_flash_attn_S) on the same q, k, v, and compares y
 * element by element: O (columns 0..d-1) and the logsumexp L (column d). y is filled with
 * NaN first and followed by a guard of NaNs, so an element your kernel forgets, or one it
 * writes past y (a row past t), shows. l8_flash_gpu does the same through the CUDA backend
 * on a GPU (your kernel, compiled by nvcc, on device tensors), and skips without one. */
#ifndef LAB08_FLASH_CHECK_H
#define LAB08_FLASH_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_out.h"
#include "kn_test.h"
#include "kiln/device.h"
#include "kiln/ir.h"
#include "kiln/kernels.h"
#include "kiln/tensor.h"
#include "runtime/cuda_flash.h"

#define L8_GUARD 64 /* NaN elements after y that the kernel must leave alone */

/* One case: bh pairs of [t, d] matrices in dtype dt (f32 or f64), scale. */
typedef struct {
    kn_dtype dt;
    int64_t bh;
    int t, d;
    double scale;
} l8_flash;

/* A uniform value in [lo, hi) from a 64-bit LCG state. */
static inline double l8_uniform(uint64_t *s, double lo, double hi) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(*s >> 11) / 9007199254740992.0;
}

/* n random values in [-amp, amp): q, k or v. */
static inline double *l8_random(int64_t n, double amp, uint64_t seed) {
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) x[i] = l8_uniform(&s, -amp, amp);
    return x;
}

/* The largest tolerated |got - want| at want: rounding (the summation orders differ, and
 * the CPU keeps the softmax sums in double). */
static inline double l8_tol(kn_dtype dt, double want) {
    return (dt == KN_DT_F32 ? 5e-5 : 1e-12) * (1 + fabs(want));
}

/* Compare got with want (both [bh, t, d + 1] in c->dt); "" when they agree, else a message
 * naming the first element that does not, in msg. */
static inline const char *l8_flash_compare(const l8_flash *c, const void *got, const void *want, char *msg,
                                           size_t msz) {
    const int64_t w = c->d + 1;
    for (int64_t p = 0; p < c->bh; p++)
        for (int64_t i = 0; i < c->t; i++)
            for (int64_t col = 0; col < w; col++) {
                int64_t e = (p * c->t + i) * w + col;
                double g = kn_dtype_load(c->dt, got, e), x = kn_dtype_load(c->dt, want, e);
                bool ok = isinf(x) ? g == x : fabs(g - x) <= l8_tol(c->dt, x); /* want is never NaN */
                if (ok) continue;
                snprintf(msg, msz, "%s bh=%lld T=%d D=%d: pair %lld, row %lld, column %lld (%s): got %.9g, want %.9g%s",
                         kn_dtype_name(c->dt), (long long)c->bh, c->t, c->d, (long long)p, (long long)i, (long long)col,
                         col == c->d ? "L, the logsumexp" : "O", g, x,
                         isnan(g) ? " (NaN: never written, or exp(-inf - -inf))" : "");
                return msg;
            }
    return "";
}

/* Your kernel under the emulator against the CPU reference on q, k, v (doubles, bh * t * d
 * each, converted to c->dt). Fails the test with what differs. */
static inline void l8_flash_check(const l8_flash *c, const double *q, const double *k, const double *v) {
    const size_t es = kn_dtype_size(c->dt);
    const int64_t n = c->bh * c->t * c->d, ny = c->bh * c->t * (c->d + 1);
    char *in = malloc((size_t)(3 * n + 1) * es), *want = malloc((size_t)(ny + 1) * es);
    char *got = malloc((size_t)(ny + L8_GUARD) * es);
    for (int64_t e = 0; e < n; e++) {
        kn_dtype_store(c->dt, in, e, q[e]);
        kn_dtype_store(c->dt, in + n * es, e, k[e]);
        kn_dtype_store(c->dt, in + 2 * n * es, e, v[e]);
    }
    memset(got, 0xFF, (size_t)(ny + L8_GUARD) * es); /* NaN */
    int rc;
    bool ref;
    kn_clear_error();
    /* your kernel's run (the checker runs none: it takes rc and y from your run) */
    const bool mine = !kn_out_checking();
    rc = 0;
    if (c->dt == KN_DT_F32) {
        const float *fq = (const float *)in, *fk = fq + n, *fv = fk + n;
        ref = kn_k_flash_attn_f32(fq, fk, fv, (float *)want, c->bh, c->t, c->d, (float)c->scale);
        if (mine) rc = kn_flash_emu_f32(fq, fk, fv, NULL, NULL, 0, (float *)got, c->bh, c->t, c->d, (float)c->scale, false);
    } else {
        const double *dq = (const double *)in, *dk = dq + n, *dv = dk + n;
        ref = kn_k_flash_attn_f64(dq, dk, dv, (double *)want, c->bh, c->t, c->d, c->scale);
        if (mine) rc = kn_flash_emu_f64(dq, dk, dv, NULL, NULL, 0, (double *)got, c->bh, c->t, c->d, c->scale, false);
    }
    kn_out("the launch's result", &rc, sizeof rc);
    kn_out("your kernel's y and what lies past it", got, (size_t)(ny + L8_GUARD) * es);
    cr_assert(ref, "the CPU reference kernel failed (out of memory?)");
    cr_assert(rc == 0, "%s bh=%lld T=%d D=%d: the launch failed (%d): %s", kn_dtype_name(c->dt), (long long)c->bh, c->t,
              c->d, rc, rc == -1 ? "a bad launch shape or a deadlock (a __syncthreads() some threads skip?), see "
                                   "stderr" : kn_last_error());
    char msg[400];
    const char *why = l8_flash_compare(c, got, want, msg, sizeof msg);
    cr_assert(!*why, "%s", why);
    for (int64_t e = ny; e < ny + L8_GUARD; e++)
        cr_assert(isnan(kn_dtype_load(c->dt, got, e)), "%s bh=%lld T=%d D=%d: element %lld past the end of y was "
                  "written (a row past t?)", kn_dtype_name(c->dt), (long long)c->bh, c->t, c->d, (long long)(e - ny));
    free(in);
    free(want);
    free(got);
}

/* l8_flash_check on random q, k, v in [-amp, amp). */
static inline void l8_flash_random(kn_dtype dt, int64_t bh, int t, int d, double amp, uint64_t seed) {
    l8_flash c = {dt, bh, t, d, d > 0 ? 1.0 / sqrt((double)d) : 1.0};
    int64_t n = bh * t * d;
    double *q = l8_random(n, amp, seed), *k = l8_random(n, amp, seed + 1), *v = l8_random(n, 1.0, seed + 2);
    l8_flash_check(&c, q, k, v);
    free(q);
    free(k);
    free(v);
}

/* ---------------------------------------------------------------- on a GPU */
#define L8_SKIP_WITHOUT_GPU()                                                                                    \
    do {                                                                                                         \
        if (kn_device_count(KN_DEVICE_CUDA) == 0)                                                                \
            cr_skip_test("no CUDA device: the GPU test of knf_fwd is skipped (the emulator's tests ran it as C)"); \
    } while (0)

/* flash_attn of random [bh, t, d] q, k, v through the CUDA backend (your kernel, as nvcc
 * compiled it) against the CPU kernel, y compared as l8_flash_check does. Only your run
 * touches the GPU: the run's status and y pass through kn_out, and the checker computes
 * only the CPU kernel's y. */
static inline void l8_flash_gpu(kn_dtype dt, int64_t bh, int t, int d, uint64_t seed) {
    const kn_device gpu = {KN_DEVICE_CUDA, 0};
    const int64_t shape[3] = {bh, t, d}, n = bh * t * d;
    const bool mine = !kn_out_checking();
    kn_tensor *h[3] = {NULL}, *dv[3] = {NULL}, *want = NULL, *got = NULL, *back = NULL;
    kn_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = KN_OP_FLASH_ATTN;
    nd.attrs = kn_attrs_default();
    nd.attrs.scale = d > 0 ? 1.0 / sqrt((double)d) : 1.0;
    nd.nin = 3;
    kn_type types[3];
    const kn_type *tp[3];
    for (int i = 0; i < 3; i++) {
        double *x = l8_random(n, 1.0, seed + (uint64_t)i);
        KN_ASSERT_OK(kn_tensor_from_f64(&h[i], dt, 3, shape, x));
        free(x);
        types[i] = (kn_type){dt, 3, {bh, t, d}};
        tp[i] = &types[i];
    }
    char msg[400];
    KN_ASSERT_OK(kn_node_infer(&nd, tp, &nd.type, msg, sizeof msg));
    KN_ASSERT_OK(kn_node_eval(&nd, (const kn_tensor *const *)h, &want));
    const size_t ybytes = (size_t)kn_tensor_numel(want) * kn_dtype_size(dt);
    char *y = calloc(ybytes + 1, 1);
    cr_assert(y, "out of memory");
    kn_status st = KN_OK;
    if (mine) {
        for (int i = 0; i < 3 && st == KN_OK; i++) st = kn_tensor_to(&dv[i], h[i], gpu);
        kn_tensor *poison = NULL; /* NaN where y will be (the allocator reuses it): a forgotten element shows */
        if (st == KN_OK) st = kn_tensor_empty_on(&poison, gpu, dt, nd.type.ndim, nd.type.shape);
        if (st == KN_OK) st = kn_device_memset(gpu, kn_tensor_data(poison), 0xFF, ybytes);
        kn_tensor_free(poison);
        if (st == KN_OK) st = kn_node_eval(&nd, (const kn_tensor *const *)dv, &got);
        if (st == KN_OK) st = kn_tensor_to(&back, got, KN_CPU);
        if (st == KN_OK) st = kn_device_synchronize(gpu);
        if (st == KN_OK) memcpy(y, kn_tensor_data(back), ybytes);
    }
    st = kn_out_status("the GPU run", st);
    KN_ASSERT_OK(st);
    kn_out("your kernel's y", y, ybytes);
    l8_flash c = {dt, bh, t, d, nd.attrs.scale};
    const char *why = l8_flash_compare(&c, y, kn_tensor_data(want), msg, sizeof msg);
    cr_assert(!*why, "on the GPU: %s", why);
    free(y);
    kn_tensor_free(back);
    kn_tensor_free(got);
    kn_tensor_free(want);
    for (int i = 0; i < 3; i++) {
        kn_tensor_free(h[i]);
        kn_tensor_free(dv[i]);
    }
}

#endif
