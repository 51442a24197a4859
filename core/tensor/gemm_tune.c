/* gemm_tune.c — the CPU GEMM's autotuner: pick the cache blocking (kc, mc) of
 * kn_k_matmul_f32 by timing candidates on this machine, and remember the choice on disk.
 *
 * The best block sizes depend on the cache sizes and the core, which a program cannot
 * read reliably; so, like the CUDA kernel cache, kiln measures once and caches: for one
 * shape class (kn_k_gemm_class) it times each candidate (kc from 64 to 512, mc from 24 to
 * 384 rows) on a product of that class, one warm-up and the median of 3 runs, and keeps
 * the fastest. Every candidate gives bitwise the same result (the GEMM sums each element
 * in the same order whatever the blocks), so tuning can never change a number, only the
 * time. The choice is written to <cache dir>/gemm-<key>.txt, where the key names the
 * element type, the shape class, the CPU (model name and vector flags) and the code
 * version (KN_GEMM_CODE_VERSION): a new machine or new kernel code tunes again. The cache
 * directory is $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
 *
 * Tests can replace the clock (kn_gemm_tune_set_timer): real timings almost never tie, so
 * the search's rule for equal times (the first candidate wins) is only testable with
 * planted times. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln/gemm.h"

/* Bump when the GEMM's code changes in a way that moves the best blocking. */
#define KN_GEMM_CODE_VERSION 1

static double kn_gemm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

kn_status kn_gemm_cache_dir(char *buf, size_t cap) {
    const char *d = getenv("KILN_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int w;
    if (d && *d) w = snprintf(buf, cap, "%s", d);
    else if (x && *x) w = snprintf(buf, cap, "%s/kiln", x);
    else if (h && *h) w = snprintf(buf, cap, "%s/.cache/kiln", h);
    else return kn_error(KN_ERR_IO, "kn_gemm_cache_dir: none of KILN_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
    if (w < 0 || (size_t)w >= cap) return kn_error(KN_ERR_IO, "kn_gemm_cache_dir: path longer than %zu bytes", cap);
    return KN_OK;
}

/* mkdir -p path. */
kn_status kn_cache_mkdirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1;; p++)
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return kn_error(KN_ERR_IO, "kn_cache_mkdirs: cannot create cache directory %s: %s", tmp, strerror(errno));
            if (c == '\0') break;
            *p = c;
        }
    return KN_OK;
}

void kn_gemm_machine(char *buf, size_t cap) {
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[1024];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *v = strchr(line, ':');
                if (v) snprintf(model, sizeof model, "%s", v + 1 + (v[1] == ' '));
                break;
            }
        fclose(f);
    }
    uint64_t hsh = 1469598103934665603ull; /* FNV-1a of the model name */
    for (const char *p = model; *p && *p != '\n'; p++) hsh = (hsh ^ (unsigned char)*p) * 1099511628211ull;
    const char *isa = "generic";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) isa = "avx512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = "avx2fma";
    else if (__builtin_cpu_supports("avx")) isa = "avx";
    else isa = "sse2";
#endif
    snprintf(buf, cap, "%s-%016llx", isa, (unsigned long long)hsh);
}

/* The planted timer, if a test set one (kn_gemm_tune_set_timer). */
static kn_gemm_timer kn_gemm_timer_fn;
static void *kn_gemm_timer_ctx;

void kn_gemm_tune_set_timer(kn_gemm_timer fn, void *ctx) {
    kn_gemm_timer_fn = fn;
    kn_gemm_timer_ctx = fn ? ctx : NULL;
}

kn_status kn_gemm_time(int64_t m, int64_t n, int64_t k, int cls, kn_gemm_config cfg, const float *a, const float *b,
                       float *c, double *sec) {
    if (!a || !b || !c || !sec || cfg.kc < 1 || cfg.mc < 1)
        return kn_error(KN_ERR_ARG, "kn_gemm_time: NULL buffer or a blocking below 1 (kc %lld, mc %lld)", (long long)cfg.kc,
                        (long long)cfg.mc);
    double t[3];
    kn_k_gemm_config_set(4, cls, cfg);
    if (kn_gemm_timer_fn) { /* planted: run the product once, report the test's time */
        kn_k_matmul_f32(a, b, c, m, n, k, false, false);
        *sec = kn_gemm_timer_fn(m, n, k, cfg, kn_gemm_timer_ctx);
        return KN_OK;
    }
    for (int r = -1; r < 3; r++) {
        double t0 = kn_gemm_now();
        kn_k_matmul_f32(a, b, c, m, n, k, false, false);
        if (r >= 0) t[r] = kn_gemm_now() - t0;
    }
    for (int i = 0; i < 3; i++) /* sort three: the median is t[1] */
        for (int j = i + 1; j < 3; j++)
            if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
    *sec = t[1];
    return KN_OK;
}

kn_status kn_gemm_tune(int64_t m, int64_t n, int64_t k, const char *cache_dir, bool force, kn_gemm_tune_result *r) {
    const char *fn = "kn_gemm_tune";
    if (!r) return kn_error(KN_ERR_ARG, "%s: r is NULL", fn);
    if (m < 1 || n < 1 || k < 1 || m > 8192 || n > 8192 || k > 8192)
        return kn_error(KN_ERR_ARG, "%s: shape %lld x %lld x %lld: each side must be in 1..8192", fn, (long long)m,
                        (long long)n, (long long)k);
    memset(r, 0, sizeof *r);
    r->cls = kn_k_gemm_class(m, n, k);
    char dir[1024], mach[128];
    if (cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
    else KN_TRY(kn_gemm_cache_dir(dir, sizeof dir));
    kn_gemm_machine(mach, sizeof mach);
    snprintf(r->key, sizeof r->key, "f32-c%d-%s-v%d", r->cls, mach, KN_GEMM_CODE_VERSION);
    snprintf(r->path, sizeof r->path, "%.900s/gemm-%.100s.txt", dir, r->key);
    FILE *f = force ? NULL : fopen(r->path, "r");
    if (f) {
        long long kc, mc;
        int got = fscanf(f, "kc %lld mc %lld", &kc, &mc);
        fclose(f);
        if (got == 2 && kc > 0 && mc > 0 && kc <= 1 << 16 && mc <= 1 << 16) {
            r->best = (kn_gemm_config){kc, mc};
            r->from_cache = true;
            kn_k_gemm_config_set(4, r->cls, r->best);
            return KN_OK;
        }
        /* an unreadable entry is tuned again and overwritten */
    }
    float *a = kn_malloc((size_t)(m * k) * 4), *b = kn_malloc((size_t)(k * n) * 4), *c = kn_malloc((size_t)(m * n) * 4);
    if (!a || !b || !c) {
        kn_free(a), kn_free(b), kn_free(c);
        return kn_error(KN_ERR_OOM, "%s: out of memory for a %lld x %lld x %lld product", fn, (long long)m, (long long)n,
                        (long long)k);
    }
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)(i % 17) * 0.125f - 1.0f;
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)(i % 13) * 0.125f - 0.75f;
    kn_status st = kn_gemm_search(m, n, k, a, b, c, r); /* lab 06 */
    if (st == KN_OK && (r->ntrials < 1 || r->ntrials > KN_GEMM_MAX_TRIALS || r->best.kc < 1 || r->best.mc < 1))
        st = kn_error(KN_ERR_INTERNAL, "%s: kn_gemm_search gave %d trials and a best blocking kc %lld, mc %lld", fn,
                      r->ntrials, (long long)r->best.kc, (long long)r->best.mc);
    if (st != KN_OK) {
        kn_free(a), kn_free(b), kn_free(c);
        kn_k_gemm_config_set(4, r->cls, (kn_gemm_config){0, 0});
        return st;
    }
    kn_free(a), kn_free(b), kn_free(c);
    kn_k_gemm_config_set(4, r->cls, r->best);
    KN_TRY(kn_cache_mkdirs(dir));
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->path);
    f = fopen(tmp, "w");
    if (!f) return kn_error(KN_ERR_IO, "%s: cannot write %s: %s", fn, tmp, strerror(errno));
    fprintf(f, "kc %lld mc %lld\n", (long long)r->best.kc, (long long)r->best.mc);
    if (fclose(f) != 0 || rename(tmp, r->path) != 0)
        return kn_error(KN_ERR_IO, "%s: cannot write %s: %s", fn, r->path, strerror(errno));
    return KN_OK;
}
