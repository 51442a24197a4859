/* kernels_train.c — the CPU kernels that training runs on (kiln/kernels.h).
 *
 * Plain loops over contiguous buffers, instantiated for float and double from one
 * template (kernels_train.inc). They are the reference and the fast path at once: the IR
 * interpreter and eager mode call exactly these, so both give bitwise equal results.
 * Invariants: the caller has checked shapes and dtypes; outputs never alias inputs
 * except where a kernel says so. */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/gemm.h"
#include "kiln/kernels.h"
#include "kiln/scalar.h"
#include "tensor/rowmath.h"

/* The hottest loops are compiled twice on x86-64, for the baseline and for AVX2 + FMA
 * (x86-64-v3), and the loader picks the clone the CPU runs (GCC/Clang target_clones).
 * Results are deterministic on a given machine; they may differ in the last bits
 * between machines with and without FMA. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define KN_K_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KN_K_CLONES
#endif

/* Elements below which splitting a row-independent kernel over threads does not pay. */
#define KN_K_PAR_MIN (1 << 16)

int kn_k_threads(void) {
    static int n = 0;
    if (n == 0) {
        const char *e = getenv("KILN_THREADS");
        long v = e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
        n = v < 1 ? 1 : v > 16 ? 16 : (int)v;
    }
    return n;
}

/* The worker pool behind kn_k_parallel. Threads are started once (on first use, again
 * after a fork: a child has none of its parent's threads) and wait for work. A call cuts
 * [0, n) into nt chunks, n * t / nt .. n * (t + 1) / nt, as before the pool, so results do
 * not change; the caller runs chunk 0, and every other chunk goes to whoever claims it
 * first: a worker that wakes up, or the caller once its own chunk is done. So on a loaded
 * machine, where a worker may not be scheduled for milliseconds, a kernel never waits for
 * a worker that has not started: the caller runs the chunk itself, and waits only for
 * chunks already running. A call made while the pool is busy (a kernel that calls
 * kn_k_parallel inside its own chunk, or another thread of the application) runs its
 * chunks one after the other on the calling thread: no deadlock, the same results.
 * Creating threads per call cost tens of microseconds per kernel, which a compiled program
 * with many small kernels paid on every one of them. */
typedef struct kn_k_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t th[16];
    int nworkers;            /* started */
    pid_t pid;               /* of the process that started them */
    bool busy;
    unsigned long gen;       /* bumped per job */
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t n;
    int nt;                  /* chunks of the current job */
    int next;                /* its first chunk nobody has claimed */
    int running;             /* chunks of it that workers are running */
    unsigned long born[16];  /* per worker: the job generation when it was created */
} kn_k_pool;

static kn_k_pool kn_k_pool_state = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
                                    .done = PTHREAD_COND_INITIALIZER};

/* Run chunk t of the current job with the pool's lock held on entry and on return. */
static void kn_k_run_chunk(kn_k_pool *p, int t) {
    void (*fn)(void *, int64_t, int64_t) = p->fn;
    void *ctx = p->ctx;
    int64_t n = p->n, nt = p->nt;
    pthread_mutex_unlock(&p->mu);
    fn(ctx, n * t / nt, n * (t + 1) / nt);
    pthread_mutex_lock(&p->mu);
}

static void *kn_k_worker(void *arg) {
    kn_k_pool *p = &kn_k_pool_state;
    int me = (int)(intptr_t)arg;
    pthread_mutex_lock(&p->mu);
    unsigned long seen = p->born[me]; /* a job posted after its creation is for it too */
    for (;;) {
        while (p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        seen = p->gen;
        while (p->busy && p->next < p->nt) { /* claim what is left of the job (nothing: too late) */
            int t = p->next++;
            p->running++;
            kn_k_run_chunk(p, t);
            if (--p->running == 0) pthread_cond_signal(&p->done);
        }
    }
    return NULL;
}

/* Start the workers (nt - 1 of them) if this process has not; false when it cannot. */
static bool kn_k_pool_ready(kn_k_pool *p, int nt) {
    if (p->pid != getpid()) { /* never started, or a forked child: its parent's threads are gone */
        p->nworkers = 0;
        p->busy = false;
        p->pid = getpid();
    }
    while (p->nworkers < nt - 1) {
        p->born[p->nworkers] = p->gen;
        if (pthread_create(&p->th[p->nworkers], NULL, kn_k_worker, (void *)(intptr_t)p->nworkers) != 0) break;
        pthread_detach(p->th[p->nworkers]);
        p->nworkers++;
    }
    return p->nworkers >= nt - 1;
}

void kn_k_parallel(int64_t n, bool worth_it, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    int nt = worth_it ? kn_k_threads() : 1;
    if (nt > n) nt = (int)(n > 0 ? n : 1);
    if (nt <= 1) { fn(ctx, 0, n); return; }
    kn_k_pool *p = &kn_k_pool_state;
    pthread_mutex_lock(&p->mu);
    if (p->busy || !kn_k_pool_ready(p, nt)) { /* nested or concurrent call, or no threads: in order, here */
        pthread_mutex_unlock(&p->mu);
        for (int t = 0; t < nt; t++) fn(ctx, n * t / nt, n * (t + 1) / nt);
        return;
    }
    p->busy = true;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->nt = nt;
    p->next = 1;
    p->running = 0;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    kn_k_run_chunk(p, 0);
    while (p->next < p->nt) kn_k_run_chunk(p, p->next++); /* chunks no worker has claimed yet */
    while (p->running > 0) pthread_cond_wait(&p->done, &p->mu);
    p->busy = false;
    pthread_mutex_unlock(&p->mu);
}

/* The matrix product's blocking per element size ([0] float, [1] double) and shape class
 * (kn_k_gemm_class); kc == 0 means the default (kc 256: a 256 x 16 float panel slice is
 * 16 KiB of L1; mc 96 / 64 rows: a 96 x 256 float block of a is 96 KiB of L2). */
static kn_gemm_config kn_k_gemm_cfg[2][KN_GEMM_CLASSES];

int kn_k_gemm_class(int64_t m, int64_t n, int64_t k) {
    double g = cbrt((double)m * (double)n * (double)k); /* the geometric mean side */
    return g < 128 ? 0 : g < 512 ? 1 : 2;
}

kn_gemm_config kn_k_gemm_config(size_t esize, int64_t m, int64_t n, int64_t k) {
    kn_gemm_config c = kn_k_gemm_cfg[esize == 8][kn_k_gemm_class(m, n, k)];
    if (c.kc <= 0 || c.mc <= 0) c = esize == 8 ? (kn_gemm_config){256, 64} : (kn_gemm_config){256, 96};
    return c;
}

void kn_k_gemm_config_set(size_t esize, int cls, kn_gemm_config cfg) {
    for (int c = 0; c < KN_GEMM_CLASSES; c++)
        if (cls < 0 || cls == c) kn_k_gemm_cfg[esize == 8][c] = cfg;
}

/* Index i of an i32 or i64 buffer. */
static inline int64_t kn_k_index_at(const void *p, kn_dtype dt, int64_t i) {
    return dt == KN_DT_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Drop size-1 axes and merge neighbouring axes that are contiguous in both operands, so
 * the innermost loop is as long as possible. Returns the new ndim (0 for one element). */
static int kn_k_coalesce(int ndim, const int64_t *shape, const int64_t *as, const int64_t *bs,
                         int64_t *sh, int64_t *sa, int64_t *sb) {
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (nd > 0 && sa[nd - 1] == as[d] * shape[d] && sb[nd - 1] == bs[d] * shape[d]) {
            sh[nd - 1] *= shape[d];
            sa[nd - 1] = as[d];
            sb[nd - 1] = bs[d];
            continue;
        }
        sh[nd] = shape[d]; sa[nd] = as[d]; sb[nd] = bs[d]; nd++;
    }
    return nd;
}

bool kn_k_dropout_keep(double p, uint64_t seed, uint64_t offset, int64_t i) {
    return (double)kn_u32_to_unit_f32(kn_rng_word_at(seed, 0, offset + (uint64_t)i)) >= p;
}

void kn_k_strided_copy(size_t esize, int ndim, const int64_t *shape, const void *src,
                       const int64_t *sstr, void *dst, const int64_t *dstr) {
    int64_t sh[KN_MAX_DIMS], ss[KN_MAX_DIMS], ds[KN_MAX_DIMS];
    int nd = kn_k_coalesce(ndim, shape, sstr, dstr, sh, ss, ds);
    for (int d = 0; d < ndim; d++) if (shape[d] == 0) return;
    if (nd == 0) { memcpy(dst, src, esize); return; }
    int64_t n = sh[nd - 1], s = ss[nd - 1], t = ds[nd - 1], outer = 1;
    int64_t idx[KN_MAX_DIMS] = {0}, os = 0, od = 0;
    for (int d = 0; d < nd - 1; d++) outer *= sh[d];
    const char *sp = src;
    char *dp = dst;
    for (int64_t r = 0; r < outer; r++) {
        if (s == 1 && t == 1) memcpy(dp + od * (int64_t)esize, sp + os * (int64_t)esize, (size_t)n * esize);
        else
            switch (esize) {
#define KN_K_COPY_CASE(SZ, TY) \
    case SZ: { const TY *a = (const TY *)(const void *)sp + os; TY *b = (TY *)(void *)dp + od; \
               for (int64_t j = 0; j < n; j++) b[j * t] = a[j * s]; } break;
            KN_K_COPY_CASE(1, uint8_t)
            KN_K_COPY_CASE(2, uint16_t)
            KN_K_COPY_CASE(4, uint32_t)
            KN_K_COPY_CASE(8, uint64_t)
#undef KN_K_COPY_CASE
            default: KN_CHECK(!"kn_k_strided_copy: element size not 1, 2, 4 or 8");
            }
        for (int d = nd - 2; d >= 0; d--) {
            os += ss[d]; od += ds[d];
            if (++idx[d] < sh[d]) break;
            os -= ss[d] * sh[d]; od -= ds[d] * sh[d]; idx[d] = 0;
        }
    }
}

/* The matrix product's packed panels, allocated afresh by every product: a buffer of 2 MiB
 * or more starts at a 2 MiB boundary (kn_malloc'ed 2 MiB larger; *raw is what to free) and
 * is marked for transparent huge pages (madvise MADV_HUGEPAGE), so the kernel maps it in
 * 2 MiB pages. Faulting 8 MiB in as 4 KiB pages took 3 ms on this course's VM, as 2 MiB
 * pages 0.15 ms: the 4 KiB faults cost a 1024^3 product 15% of its time. */
static void *kn_k_pack_alloc(size_t bytes, void **raw) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge) return *raw = kn_malloc(bytes);
    char *p = kn_malloc(bytes + huge);
    *raw = p;
    if (!p) return NULL;
    char *a = (char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, bytes & ~(size_t)4095, MADV_HUGEPAGE); /* advice only: nothing to do when refused */
#endif
    return a;
}

#define T float
#define S f32
#define KN_GEMM_F32_UNITS /* the GEMM's building blocks are lab 06's (kiln/gemm.h) */
#define MR_ KN_GEMM_MR /* the register block of the matrix-product micro-kernel: rows x columns of c */
#define NR_ KN_GEMM_NR
#define VW_ 8
#define EXP_ expf
#define LOG_ logf
#define SQRT_ sqrtf
#define TANH_ tanhf
#include "kernels_train.inc"
#include "kernels_flash.inc"
#undef KN_GEMM_F32_UNITS
#undef T
#undef S
#undef MR_
#undef NR_
#undef VW_
#undef EXP_
#undef LOG_
#undef SQRT_
#undef TANH_

#define T double
#define S f64
#define MR_ 4
#define NR_ 8
#define VW_ 4
#define EXP_ exp
#define LOG_ log
#define SQRT_ sqrt
#define TANH_ tanh
#include "kernels_train.inc"
#include "kernels_flash.inc"
#undef T
#undef S
#undef MR_
#undef NR_
#undef VW_
#undef EXP_
#undef LOG_
#undef SQRT_
#undef TANH_
