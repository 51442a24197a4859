/* test_device_streams.c — streams and events of kiln/device.h.
 *
 * On the CPU (here and everywhere): a stream's copies are done when the call returns,
 * events are recorded wall-clock times whose difference brackets a measured sleep, and
 * every misuse (NULL handles, an event never recorded, a stream and an event of two
 * devices, a stream of the wrong device type for a copy) is a KN_ERR_ARG with a message
 * naming the function; creation fails cleanly (KN_ERR_OOM) under allocation failure, and
 * CUDA handles fail with KN_ERR_DEVICE or KN_ERR_UNSUPPORTED where no GPU can be used.
 *
 * On a GPU: an asynchronous round trip through a stream; ordering between two streams by
 * an event (stream 2 copies a buffer that stream 1 fills, after waiting for stream 1's
 * event) gives the new contents; an event timing a large copy reads a positive time that
 * implies a plausible bandwidth; query reports done after a synchronize. Last, device
 * names as the command line spells them (kn_device_parse). */
#include <string.h>
#include <time.h>

#include "kiln/device.h"
#include "kn_test.h"

#define CUDA0 ((kn_device){KN_DEVICE_CUDA, 0})

KN_TEST(device_streams, cpu_stream_copies_and_events_time_the_host) {
    kn_stream *s = NULL;
    kn_event *a = NULL, *b = NULL;
    KN_ASSERT_OK(kn_stream_new(KN_CPU, &s));
    cr_assert(kn_device_equal(kn_stream_device(s), KN_CPU));
    KN_ASSERT_OK(kn_event_new(KN_CPU, &a));
    KN_ASSERT_OK(kn_event_new(KN_CPU, &b));
    char src[64], dst[64];
    for (int i = 0; i < 64; i++) { src[i] = (char)(i * 7); dst[i] = 0; }
    KN_ASSERT_OK(kn_event_record(a, s));
    KN_ASSERT_OK(kn_device_memcpy_async(s, KN_CPU, dst, KN_CPU, src, sizeof src));
    cr_assert(!memcmp(dst, src, sizeof src), "a CPU copy is done when the call returns");
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    KN_ASSERT_OK(kn_event_record(b, NULL));
    KN_ASSERT_OK(kn_stream_wait_event(s, b));
    KN_ASSERT_OK(kn_stream_wait_event(NULL, b));
    KN_ASSERT_OK(kn_event_synchronize(b));
    KN_ASSERT_OK(kn_stream_synchronize(s));
    bool done = false;
    KN_ASSERT_OK(kn_event_query(b, &done));
    cr_assert(done);
    double ms = 0;
    KN_ASSERT_OK(kn_event_elapsed_ms(a, b, &ms));
    cr_assert(ms >= 19.0 && ms < 5000.0, "20 ms of sleep measured as %g ms", ms);
    KN_ASSERT_OK(kn_device_memcpy_async(s, KN_CPU, dst, KN_CPU, src, 0));
    kn_event_free(a);
    kn_event_free(b);
    kn_stream_free(s);
    kn_stream_free(NULL);
    kn_event_free(NULL);
}

static void assert_message(const char *what) {
    cr_assert(strstr(kn_last_error(), what), "expected '%s' in: %s", what, kn_last_error());
}

KN_TEST(device_streams, misuse_is_a_clear_error) {
    kn_stream *s = NULL;
    kn_event *e = NULL, *f = NULL;
    KN_ASSERT_ERR(kn_stream_new(KN_CPU, NULL), KN_ERR_ARG);
    assert_message("kn_stream_new: out is NULL");
    KN_ASSERT_ERR(kn_event_new(KN_CPU, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_stream_new((kn_device){(kn_device_type)7, 0}, &s), KN_ERR_ARG);
    cr_assert_null(s);
    KN_ASSERT_OK(kn_stream_new(KN_CPU, &s));
    KN_ASSERT_OK(kn_event_new(KN_CPU, &e));
    KN_ASSERT_ERR(kn_event_synchronize(e), KN_ERR_ARG);
    assert_message("kn_event_synchronize: the event was never recorded");
    bool done;
    KN_ASSERT_ERR(kn_event_query(e, &done), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_event_query(e, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_stream_wait_event(s, e), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_stream_wait_event(s, NULL), KN_ERR_ARG);
    assert_message("kn_stream_wait_event: NULL event");
    KN_ASSERT_ERR(kn_stream_synchronize(NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_event_record(NULL, s), KN_ERR_ARG);
    double ms;
    KN_ASSERT_OK(kn_event_record(e, s));
    KN_ASSERT_ERR(kn_event_elapsed_ms(e, e, NULL), KN_ERR_ARG);
    KN_ASSERT_OK(kn_event_new(KN_CPU, &f));
    KN_ASSERT_ERR(kn_event_elapsed_ms(e, f, &ms), KN_ERR_ARG);
    assert_message("(stop): the event was never recorded");
    char a[8] = {0}, b[8] = {0};
    KN_ASSERT_ERR(kn_device_memcpy_async(s, KN_CPU, NULL, KN_CPU, b, 8), KN_ERR_ARG);
    assert_message("kn_device_memcpy_async: dst pointer is NULL");
    /* A stream and a copy of different device types (only reachable with a GPU device). */
    if (kn_device_count(KN_DEVICE_CUDA) > 0) {
        kn_stream *g = NULL;
        kn_event *ge = NULL;
        KN_ASSERT_OK(kn_stream_new(CUDA0, &g));
        KN_ASSERT_OK(kn_event_new(CUDA0, &ge));
        KN_ASSERT_ERR(kn_device_memcpy_async(g, KN_CPU, a, KN_CPU, b, 8), KN_ERR_ARG);
        assert_message("cannot run on a stream of cuda");
        KN_ASSERT_ERR(kn_event_record(e, g), KN_ERR_ARG);
        assert_message("kn_event_record: the event is on cpu, the stream on cuda:0");
        KN_ASSERT_OK(kn_event_record(ge, g));
        KN_ASSERT_ERR(kn_stream_wait_event(s, ge), KN_ERR_ARG);
        KN_ASSERT_ERR(kn_event_elapsed_ms(e, ge, &ms), KN_ERR_ARG);
        kn_event_free(ge);
        kn_stream_free(g);
    } else {
        kn_stream *g = NULL;
        kn_event *ge = NULL;
        kn_status st = kn_stream_new(CUDA0, &g);
        cr_assert(st == KN_ERR_DEVICE || st == KN_ERR_UNSUPPORTED, "no GPU: %s", kn_status_name(st));
        cr_assert_null(g);
        st = kn_event_new(CUDA0, &ge);
        cr_assert(st == KN_ERR_DEVICE || st == KN_ERR_UNSUPPORTED, "no GPU: %s", kn_status_name(st));
        cr_assert_null(ge);
    }
    kn_event_free(e);
    kn_event_free(f);
    kn_stream_free(s);
}

KN_TEST(device_streams, creation_fails_cleanly_without_memory) {
    kn_stream *s = NULL;
    kn_event *e = NULL;
    for (int n = 0; n < 2; n++) {
        kn_alloc_fail_after(n);
        kn_status st = kn_stream_new(KN_CPU, &s);
        kn_alloc_fail_after(-1);
        cr_assert_eq(st, KN_ERR_OOM, "allocation %d failing: %s", n, kn_status_name(st));
        cr_assert_null(s);
        kn_alloc_fail_after(n);
        st = kn_event_new(KN_CPU, &e);
        kn_alloc_fail_after(-1);
        cr_assert_eq(st, KN_ERR_OOM, "allocation %d failing: %s", n, kn_status_name(st));
        cr_assert_null(e);
    }
}

KN_TEST(device_streams, gpu_streams_order_by_events_and_time_copies) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    const size_t n = (size_t)64 << 20; /* 64 MiB */
    unsigned char *host = kn_malloc(n), *back = kn_malloc(n);
    cr_assert(host && back);
    for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 131u >> 3);
    void *a = NULL, *b = NULL;
    KN_ASSERT_OK(kn_device_alloc(CUDA0, n, &a));
    KN_ASSERT_OK(kn_device_alloc(CUDA0, n, &b));
    KN_ASSERT_OK(kn_device_memset(CUDA0, b, 0, n));
    kn_stream *s1 = NULL, *s2 = NULL;
    kn_event *t0 = NULL, *t1 = NULL, *filled = NULL;
    KN_ASSERT_OK(kn_stream_new(CUDA0, &s1));
    KN_ASSERT_OK(kn_stream_new(CUDA0, &s2));
    KN_ASSERT_OK(kn_event_new(CUDA0, &t0));
    KN_ASSERT_OK(kn_event_new(CUDA0, &t1));
    KN_ASSERT_OK(kn_event_new(CUDA0, &filled));
    /* s1: upload into a (timed); s2: waits for that, then copies a -> b; host reads b. */
    KN_ASSERT_OK(kn_event_record(t0, s1));
    KN_ASSERT_OK(kn_device_memcpy_async(s1, CUDA0, a, KN_CPU, host, n));
    KN_ASSERT_OK(kn_event_record(t1, s1));
    KN_ASSERT_OK(kn_event_record(filled, s1));
    KN_ASSERT_OK(kn_stream_wait_event(s2, filled));
    KN_ASSERT_OK(kn_device_memcpy_async(s2, CUDA0, b, CUDA0, a, n));
    KN_ASSERT_OK(kn_device_memcpy_async(s2, KN_CPU, back, CUDA0, b, n));
    KN_ASSERT_OK(kn_stream_synchronize(s2));
    cr_assert(!memcmp(back, host, n), "stream 2 copied before stream 1's upload was done");
    double ms = 0;
    KN_ASSERT_OK(kn_event_elapsed_ms(t0, t1, &ms));
    double gbs = (double)n / (ms * 1e6);
    cr_assert(ms > 0 && gbs > 0.05 && gbs < 1000, "64 MiB upload took %g ms (%g GB/s)", ms, gbs);
    bool done = false;
    KN_ASSERT_OK(kn_event_synchronize(t1));
    KN_ASSERT_OK(kn_event_query(t1, &done));
    cr_assert(done);
    /* the default stream waits for s2's event too */
    KN_ASSERT_OK(kn_event_record(filled, s2));
    KN_ASSERT_OK(kn_stream_wait_event(NULL, filled));
    KN_ASSERT_OK(kn_device_synchronize(CUDA0));
    kn_event_free(t0);
    kn_event_free(t1);
    kn_event_free(filled);
    kn_stream_free(s1);
    kn_stream_free(s2);
    kn_device_free(CUDA0, a, n);
    kn_device_free(CUDA0, b, n);
    kn_free(host);
    kn_free(back);
}

KN_TEST(device_streams, device_names_parse_as_the_command_line_spells_them) {
    kn_device d;
    KN_ASSERT_OK(kn_device_parse("cpu", &d));
    cr_assert(kn_device_equal(d, KN_CPU));
    KN_ASSERT_OK(kn_device_parse("cuda", &d));
    cr_assert(kn_device_equal(d, CUDA0));
    KN_ASSERT_OK(kn_device_parse("cuda:7", &d));
    cr_assert(kn_device_equal(d, ((kn_device){KN_DEVICE_CUDA, 7})));
    KN_ASSERT_OK(kn_device_parse("auto", &d));
    cr_assert(kn_device_equal(d, kn_device_count(KN_DEVICE_CUDA) > 0 ? CUDA0 : KN_CPU));
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1024", "cuda:1x", "cuda:00001", "CPU", "", "cuda: 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KN_ASSERT_ERR(kn_device_parse(bad[i], &d), KN_ERR_ARG);
        cr_assert(strstr(kn_last_error(), "expected auto, cpu, cuda or cuda:N"), "'%s': %s", bad[i], kn_last_error());
    }
    KN_ASSERT_ERR(kn_device_parse(NULL, &d), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_parse("cpu", NULL), KN_ERR_ARG);
}
