/* test_data_safetensors.c — safetensors checkpoints: round trip, a check by Python's
 * standard library (json + struct) and by the `safetensors` package when installed, and a
 * specific KN_ERR_FORMAT for each kind of malformed file. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/data.h"
#include "kn_test.h"

static const float k_a[6] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f};
static const int32_t k_b[4] = {-1, 2, -3, 4};
static const double k_c = 3.25;

static void write_sample(const char *path) {
    kn_st_tensor ts[3] = {
        {.name = "a", .dtype = KN_DT_F32, .ndim = 2, .shape = {2, 3}, .data = k_a, .nbytes = sizeof k_a},
        {.name = "b", .dtype = KN_DT_I32, .ndim = 1, .shape = {4}, .data = k_b, .nbytes = sizeof k_b},
        {.name = "c", .dtype = KN_DT_F64, .ndim = 0, .data = &k_c, .nbytes = sizeof k_c},
    };
    kn_st_meta meta[2] = {{"step", "7"}, {"config", "{\"layers\": 2}"}};
    KN_ASSERT_OK(kn_safetensors_write(path, 3, ts, 2, meta));
}

static void sample_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/kiln-test-st-%ld-%s.safetensors", (long)getpid(), tag);
}

KN_TEST(data_safetensors, round_trip) {
    char path[128];
    sample_path(path, sizeof path, "rt");
    write_sample(path);
    kn_safetensors st;
    KN_ASSERT_OK(kn_safetensors_read(path, &st));
    cr_assert_eq(st.n_tensors, 3);
    const kn_st_tensor *a = kn_safetensors_find(&st, "a"), *b = kn_safetensors_find(&st, "b"),
                       *c = kn_safetensors_find(&st, "c");
    cr_assert(a && b && c);
    cr_assert(a->dtype == KN_DT_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
    cr_assert(memcmp(a->data, k_a, sizeof k_a) == 0);
    cr_assert(b->dtype == KN_DT_I32 && b->ndim == 1 && memcmp(b->data, k_b, sizeof k_b) == 0);
    cr_assert(c->dtype == KN_DT_F64 && c->ndim == 0 && memcmp(c->data, &k_c, 8) == 0);
    cr_assert_null(kn_safetensors_find(&st, "d"));
    cr_assert_str_eq(kn_safetensors_meta(&st, "step"), "7");
    cr_assert_str_eq(kn_safetensors_meta(&st, "config"), "{\"layers\": 2}");
    cr_assert_null(kn_safetensors_meta(&st, "nope"));
    /* the header is padded so the data starts 8-byte aligned */
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)st.buf[i] << (8 * i);
    cr_assert_eq((8 + hl) % 8, 0);
    kn_safetensors_free(&st);
    remove(path);
}

/* Run the Python checker; returns its exit status (77 = skip). */
static int run_checker(const char *mode, const char *path) {
    if (access("tests/core/test_data_safetensors.py", R_OK) != 0) return -1;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 tests/core/test_data_safetensors.py %s %s", mode, path);
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

KN_TEST(data_safetensors, python_stdlib_reads_it) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    if (access("tests/core/test_data_safetensors.py", R_OK) != 0)
        cr_skip_test("run from the repository root (tests/core/test_data_safetensors.py not found)");
    char path[128];
    sample_path(path, sizeof path, "py");
    write_sample(path);
    int rc = run_checker("stdlib", path);
    remove(path);
    cr_assert_eq(rc, 0, "the json+struct reader disagrees (exit %d)", rc);
}

KN_TEST(data_safetensors, python_safetensors_package_reads_it) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) cr_skip_test("python3 is not installed");
    if (access("tests/core/test_data_safetensors.py", R_OK) != 0)
        cr_skip_test("run from the repository root (tests/core/test_data_safetensors.py not found)");
    char path[128];
    sample_path(path, sizeof path, "pkg");
    write_sample(path);
    int rc = run_checker("package", path);
    remove(path);
    if (rc == 77) cr_skip_test("python package 'safetensors' (with numpy) is not installed: pip install safetensors numpy");
    cr_assert_eq(rc, 0, "the safetensors package disagrees (exit %d)", rc);
}

/* A file image: 8-byte length + header text + data bytes. */
static size_t image(uint8_t *out, const char *header, size_t data_len) {
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(out + 8, header, n);
    memset(out + 8 + n, 0, data_len);
    return 8 + n + data_len;
}

static void expect_bad(const char *header, size_t data_len, const char *needle) {
    uint8_t buf[1024];
    size_t len = image(buf, header, data_len);
    kn_safetensors st;
    KN_ASSERT_ERR(kn_safetensors_parse(buf, len, "bad.safetensors", &st), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), needle) != NULL, "header %s\n    expected '%s' in: %s", header, needle,
              kn_last_error());
    cr_assert(strstr(kn_last_error(), "bad.safetensors") != NULL, "names the file: %s", kn_last_error());
}

KN_TEST(data_safetensors, malformed_files_give_specific_errors) {
    uint8_t buf[1024];
    kn_safetensors st;
    size_t len = image(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    KN_ASSERT_OK(kn_safetensors_parse(buf, len, "good", &st));
    kn_safetensors_free(&st);
    len = image(buf, "{}", 0);
    KN_ASSERT_OK(kn_safetensors_parse(buf, len, "empty", &st));
    cr_assert_eq(st.n_tensors, 0);
    kn_safetensors_free(&st);

    KN_ASSERT_ERR(kn_safetensors_parse(buf, 5, "bad.safetensors", &st), KN_ERR_FORMAT);
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
    KN_ASSERT_ERR(kn_safetensors_parse(huge, 10, "bad.safetensors", &st), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "header length") != NULL, "%s", kn_last_error());

    expect_bad("[1, 2]", 0, "start with '{'");
    expect_bad("{\"x\": }", 0, "invalid JSON");
    expect_bad("{\"x\": {\"dtype\": \"F32\"", 0, "invalid JSON");
    expect_bad("{\"x\": \"\\q\"}", 0, "unknown escape");
    expect_bad("{\"x\": 1} x", 0, "text after");
    expect_bad("{\"x\": 1}", 0, "not a JSON object");
    expect_bad("{\"x\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype F99");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape entry 0");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets must be");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "outside the 8 data bytes");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "a gap");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "an overlap");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "cover 8 data bytes");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "appears twice");
    expect_bad("{\"__metadata__\":{\"step\":7}}", 0, "not a string");
    expect_bad("{\"__metadata__\":[1]}", 0, "__metadata__ is not an object");
    KN_ASSERT_ERR(kn_safetensors_read("/nonexistent/ckpt.safetensors", &st), KN_ERR_IO);
}

KN_TEST(data_safetensors, writer_rejects_bad_tensors) {
    float x[2] = {1, 2};
    kn_st_tensor t = {.name = "x", .dtype = KN_DT_F32, .ndim = 1, .shape = {3}, .data = x, .nbytes = sizeof x};
    KN_ASSERT_ERR(kn_safetensors_write("/tmp/kiln-never-written.safetensors", 1, &t, 0, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "needs 12 bytes") != NULL, "%s", kn_last_error());
    kn_st_tensor two[2] = {{.name = "x", .dtype = KN_DT_F32, .ndim = 1, .shape = {2}, .data = x, .nbytes = 8},
                           {.name = "x", .dtype = KN_DT_F32, .ndim = 1, .shape = {2}, .data = x, .nbytes = 8}};
    KN_ASSERT_ERR(kn_safetensors_write("/tmp/kiln-never-written.safetensors", 2, two, 0, NULL), KN_ERR_ARG);
    two[1].name = "__metadata__";
    KN_ASSERT_ERR(kn_safetensors_write("/tmp/kiln-never-written.safetensors", 2, two, 0, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_safetensors_write("/nonexistent/dir/x.safetensors", 1, two, 0, NULL), KN_ERR_IO);
}

/* Make the 1st, 2nd, ... allocation fail: every reader fails cleanly with KN_ERR_OOM (and,
 * under ASan, leaks nothing) until enough allocations succeed. */
KN_TEST(data_safetensors, allocation_failures_are_clean) {
    char path[128];
    sample_path(path, sizeof path, "oom");
    write_sample(path);
    uint8_t *raw;
    size_t len;
    KN_ASSERT_OK(kn_file_read_all(path, &raw, &len));
    remove(path);
    bool done = false;
    for (long n = 0; n < 200 && !done; n++) {
        kn_safetensors st;
        kn_alloc_fail_after(n);
        kn_status s = kn_safetensors_parse(raw, len, "oom", &st);
        kn_alloc_fail_after(-1);
        cr_assert(s == KN_OK || s == KN_ERR_OOM, "allocation %ld failing gave %s: %s", n, kn_status_name(s),
                  kn_last_error());
        if (s == KN_OK) {
            cr_assert_eq(st.n_tensors, 3);
            kn_safetensors_free(&st);
            done = true;
        }
    }
    cr_assert(done, "parsing never succeeded");
    kn_free(raw);
    done = false;
    for (long n = 0; n < 50 && !done; n++) {
        char *t;
        size_t tl;
        kn_alloc_fail_after(n);
        kn_status s = kn_corpus_generate(3, 20000, &t, &tl);
        kn_alloc_fail_after(-1);
        cr_assert(s == KN_OK || s == KN_ERR_OOM, "corpus: allocation %ld failing gave %s", n, kn_status_name(s));
        if (s == KN_OK) { kn_free(t); done = true; }
    }
    cr_assert(done);
}
