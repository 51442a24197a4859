/* test_tensor_device.c — the device table, CUDA behaviour with and without a GPU, memory
 * stats, and the cpu -> cuda -> cpu round trip (skipped, with one line, without a GPU). */
#include "tensor_test_util.h"

/* Skip with one line; run-suite.sh counts it as skipped, not passed. */
#define TT_SKIP(msg) cr_skip_test(msg)

KN_TEST(tensor_device, table_and_names) {
    const kn_device_backend *cpu = kn_device_backend_get(KN_DEVICE_CPU);
    cr_assert(cpu);
    cr_assert_str_eq(cpu->name, "cpu");
    cr_assert_eq(cpu->type, KN_DEVICE_CPU);
    cr_assert_null(kn_device_backend_get(KN_DEVICE_TYPE_COUNT));
    cr_assert_eq(kn_device_count(KN_DEVICE_CPU), 1);
    cr_assert_eq(kn_device_count(KN_DEVICE_TYPE_COUNT), 0);
    cr_assert_str_eq(kn_device_type_name(KN_DEVICE_CUDA), "cuda");
    cr_assert_str_eq(kn_device_type_name(KN_DEVICE_TYPE_COUNT), "?");
    char buf[32];
    cr_assert_str_eq(kn_device_str(KN_CPU, buf, sizeof buf), "cpu");
    cr_assert_str_eq(kn_device_str((kn_device){KN_DEVICE_CUDA, 1}, buf, sizeof buf), "cuda:1");
    cr_assert(kn_device_equal(KN_CPU, (kn_device){KN_DEVICE_CPU, 0}));
    cr_assert(!kn_device_equal(KN_CPU, (kn_device){KN_DEVICE_CUDA, 0}));
    KN_ASSERT_OK(kn_device_check("t", KN_CPU));
    KN_ASSERT_ERR(kn_device_check("my_caller", (kn_device){KN_DEVICE_CPU, 1}), KN_ERR_DEVICE);
    cr_assert(strstr(kn_last_error(), "my_caller"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_device_check("t", (kn_device){KN_DEVICE_CPU, -1}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_check("t", (kn_device){(kn_device_type)7, 0}), KN_ERR_ARG);
}

KN_TEST(tensor_device, cpu_alloc_copy_set_stats) {
    kn_device_mem_stats s0, s1, s2;
    KN_ASSERT_OK(kn_device_mem_stats_get(KN_CPU, &s0));
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_empty(&t, KN_DT_F64, 2, (int64_t[]){256, 512}));
    KN_ASSERT_OK(kn_device_mem_stats_get(KN_CPU, &s1));
    cr_assert_eq(s1.current, s0.current + 256 * 512 * 8);
    cr_assert(s1.peak >= s1.current);
    cr_assert_eq(s1.allocs, s0.allocs + 1);
    kn_tensor_free(t);
    KN_ASSERT_OK(kn_device_mem_stats_get(KN_CPU, &s2));
    cr_assert_eq(s2.current, s0.current);
    cr_assert(s2.peak >= s1.current);
    void *p;
    KN_ASSERT_OK(kn_device_alloc(KN_CPU, 16, &p));
    KN_ASSERT_OK(kn_device_memset(KN_CPU, p, 0xab, 16));
    unsigned char q[16];
    KN_ASSERT_OK(kn_device_memcpy(KN_CPU, q, KN_CPU, p, 16));
    cr_assert_eq(q[15], 0xab);
    KN_ASSERT_OK(kn_device_synchronize(KN_CPU));
    kn_device_free(KN_CPU, p, 16);
    KN_ASSERT_ERR(kn_device_alloc(KN_CPU, 16, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_memcpy(KN_CPU, NULL, KN_CPU, q, 16), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_memset(KN_CPU, NULL, 0, 16), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_mem_stats_get(KN_CPU, NULL), KN_ERR_ARG);
    kn_alloc_fail_after(0);
    kn_status st = kn_device_alloc(KN_CPU, 16, &p);
    kn_alloc_fail_after(-1);
    cr_assert_eq(st, KN_ERR_OOM, "%s", kn_status_name(st));
}

/* Without a usable GPU, asking for CUDA memory fails cleanly with the right code. */
KN_TEST(tensor_device, cuda_unavailable_fails_cleanly) {
    if (kn_device_count(KN_DEVICE_CUDA) > 0) TT_SKIP("a CUDA device is present: tested by gpu_round_trip");
    kn_device cuda = {KN_DEVICE_CUDA, 0};
    kn_tensor *t = NULL;
    kn_status want = kn_device_backend_get(KN_DEVICE_CUDA) ? KN_ERR_DEVICE : KN_ERR_UNSUPPORTED;
    KN_ASSERT_ERR(kn_tensor_empty_on(&t, cuda, KN_DT_F32, 1, (int64_t[]){4}), want);
    cr_assert(strstr(kn_last_error(), "kn_tensor_empty_on") && strstr(kn_last_error(), "cuda:0"), "%s", kn_last_error());
    if (want == KN_ERR_UNSUPPORTED) cr_assert(strstr(kn_last_error(), "without CUDA"), "%s", kn_last_error());
    else cr_assert(strstr(kn_last_error(), "cuda"), "the CUDA error string: %s", kn_last_error());
    cr_assert_null(t);
    kn_tensor *x;
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 1, (int64_t[]){4}));
    KN_ASSERT_ERR(kn_tensor_to(&t, x, cuda), want);
    KN_ASSERT_ERR(kn_device_synchronize(cuda), want);
    kn_tensor_free(x);
    cr_assert_null(t);
}

/* A tensor whose storage claims to be on a GPU (host bytes behind it, never read as such):
 * every CPU kernel refuses it with KN_ERR_DEVICE, views still work. */
KN_TEST(tensor_device, cpu_kernels_refuse_device_tensors) {
    float bytes[6] = {0};
    kn_storage st = {.refcount = 1, .device = {KN_DEVICE_CUDA, 0}, .nbytes = sizeof bytes, .data = bytes, .owns_data = false};
    kn_tensor g = {.storage = &st, .dtype = KN_DT_F32, .ndim = 2, .shape = {2, 3}, .strides = {3, 1}, .offset = 0};
    kn_tensor *c, *o = NULL, *v;
    KN_ASSERT_OK(kn_tensor_zeros(&c, KN_DT_F32, 2, (int64_t[]){2, 3}));
    double d;
    KN_ASSERT_ERR(kn_tensor_get(&g, (int64_t[]){0, 0}, &d), KN_ERR_DEVICE);
    cr_assert(strstr(kn_last_error(), "cuda:0") && strstr(kn_last_error(), "kn_tensor_get"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_unary(&o, KN_UNARY_EXP, &g), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, c, &g), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_matmul(&o, &g, c), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &g, 0, NULL, false), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_copy_into(c, &g), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_clone(&o, &g), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_softmax(&o, &g, 0), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_to_f64(&g, &d), KN_ERR_DEVICE);
    cr_assert_null(o);
    KN_ASSERT_OK(kn_tensor_transpose(&v, &g, 0, 1)); /* views need no kernel */
    cr_assert_eq(st.refcount, 2);
    kn_tensor_free(v);
    cr_assert_eq(st.refcount, 1);
    kn_tensor_free(c);
}

KN_TEST(tensor_device, gpu_round_trip) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) TT_SKIP("no CUDA device: GPU test skipped");
    kn_device cuda = {KN_DEVICE_CUDA, 0};
    kn_tensor *x = tt_rand(KN_DT_F32, 2, (int64_t[]){37, 53}, 3, -1, 1), *xt, *g, *gt, *back, *backt, *gs, *backs;
    KN_ASSERT_OK(kn_tensor_to(&g, x, cuda));
    cr_assert_eq(g->storage->device.type, KN_DEVICE_CUDA);
    KN_ASSERT_OK(kn_tensor_to(&back, g, KN_CPU));
    cr_assert_eq(memcmp(back->storage->data, x->storage->data, 37 * 53 * sizeof(float)), 0);
    /* A strided CPU view goes over contiguous; a strided GPU view keeps its strides. */
    KN_ASSERT_OK(kn_tensor_transpose(&xt, x, 0, 1));
    KN_ASSERT_OK(kn_tensor_to(&gt, xt, cuda));
    KN_ASSERT_OK(kn_tensor_to(&backt, gt, KN_CPU));
    KN_ASSERT_OK(kn_tensor_slice(&gs, gt, 1, 3, 30, 4));
    KN_ASSERT_OK(kn_tensor_to(&backs, gs, KN_CPU));
    double ea, er;
    KN_ASSERT_OK(kn_tensor_max_diff(backt, xt, &ea, &er));
    cr_assert_eq(ea, 0.0);
    for (int64_t i = 0; i < backs->shape[0]; i++)
        for (int64_t j = 0; j < backs->shape[1]; j++)
            cr_assert_eq(tt_at(backs, (int64_t[]){i, j}), tt_at(xt, (int64_t[]){i, 3 + 4 * j}));
    kn_device_mem_stats ms;
    KN_ASSERT_OK(kn_device_mem_stats_get(cuda, &ms));
    cr_assert(ms.current >= 2 * 37 * 53 * sizeof(float) && ms.peak >= ms.current);
    KN_ASSERT_OK(kn_device_memset(cuda, g->storage->data, 0, g->storage->nbytes));
    KN_ASSERT_OK(kn_device_synchronize(cuda));
    kn_tensor_free(back);
    KN_ASSERT_OK(kn_tensor_to(&back, g, KN_CPU));
    for (int i = 0; i < 37 * 53; i++) cr_assert_eq(((float *)back->storage->data)[i], 0.0f);
    kn_tensor *bad = NULL;
    KN_ASSERT_ERR(kn_tensor_empty_on(&bad, (kn_device){KN_DEVICE_CUDA, 999}, KN_DT_F32, 1, (int64_t[]){1}), KN_ERR_DEVICE);
    cr_assert_null(bad);
    kn_tensor_free(x); kn_tensor_free(xt); kn_tensor_free(g); kn_tensor_free(gt); kn_tensor_free(back);
    kn_tensor_free(backt); kn_tensor_free(gs); kn_tensor_free(backs);
}
