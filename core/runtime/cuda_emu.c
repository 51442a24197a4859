/* cuda_emu.c: the scheduler behind cuda_emu.h, and its checks.
 *
 * Each thread of a block is a ucontext coroutine; the scheduler resumes every thread in
 * turn (in a seeded random order, KN_EMU_SEED) until it either returns or parks at
 * __syncthreads() or a warp meeting. When all live threads wait at the same barrier, the
 * barrier opens. If some returned while others wait, or the waiting threads wait at
 * different barriers, no thread can ever move on as the program means: a deadlock or a
 * divergent barrier on the GPU, reported here instead of hanging.
 *
 * The checks compute-sanitizer makes on a GPU (memcheck, racecheck, synccheck), made here on
 * the CPU so that a machine without a GPU finds the same bugs:
 *   - a generated kernel indexes its buffers through KN_EMU_AT (the renderer knows each
 *     buffer's view): an index outside it lands in kn_emu_oob, reported with the line;
 *   - code compiled with the emulator's access hooks (cc.c does it for the emulator dialect,
 *     KN_EMU_INSTRUMENT; gcc -fsanitize=kernel-address makes every load and store call
 *     __asan_loadN/storeN_noabort, defined below) is watched byte for byte: an access to the
 *     block's shared memory (the kn_emu_shared section every __shared__ array is put in)
 *     goes through a shadow record of which thread last wrote each byte and which threads
 *     read it since the last barrier: a write and another thread's read or write of the
 *     same byte with no barrier between (nor, within a warp, a shuffle) is a race; an access just outside the shared memory
 *     or a buffer given to kn_emu_watch is out of bounds.
 * Every finding names the kernel, the block, the thread and the source line (addr2line on
 * the hooks' return address, when the code has debug information). A launch with findings
 * returns -1 after the block that made them. */
#define _GNU_SOURCE
#include "cuda_emu.h"
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

enum { KN_EMU_STACK = 64 * 1024, KN_EMU_MAX_THREADS = 1024 };
enum { RUNNING, AT_BARRIER, AT_WARP, DONE, FAULTED };
enum { KN_EMU_FINDINGS = 6, KN_EMU_SLACK = 256, KN_EMU_WINDOWS = 64, KN_EMU_WATCHED = 64 };

kn_dim3 kn_emu_thread_idx, kn_emu_block_idx, kn_emu_block_dim, kn_emu_grid_dim;

static ucontext_t sched_ctx;
static ucontext_t *thread_ctx;
static int *thread_state;
static const char **bar_fn; /* where each thread waits: the barrier's function and line */
static int *bar_line;
static unsigned cur;
static void (*cur_fn)(void *);
static void *cur_args;

/* The launch being run: the checks look only while one runs. The epoch counts barriers
 * (and blocks): two accesses in the same epoch have no barrier between them. */
static int emu_active;
static unsigned emu_epoch = 1;
static unsigned warp_epoch[KN_EMU_MAX_THREADS / 32]; /* each warp's meetings (shuffles, mma) */
static char emu_kernel[128];

/* What the checks found in this block: printed (and symbolized) by the scheduler. */
typedef struct {
    char what[400];
    const void *pc; /* the hooked access's return address, or NULL when file/fn/line say where */
    const char *file, *fn;
    int line;
    unsigned thread;
} kn_emu_finding;
static kn_emu_finding findings[KN_EMU_FINDINGS];
static int nfindings, nlost;

static kn_dim3 kn_emu_unflatten(unsigned i, kn_dim3 d)
{
    kn_dim3 r = { i % d.x, (i / d.x) % d.y, i / (d.x * d.y) };
    return r;
}

static void emu_find(const void *pc, const char *file, const char *fn, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void emu_find(const void *pc, const char *file, const char *fn, int line, const char *fmt, ...)
{
    if (nfindings == KN_EMU_FINDINGS) {
        nlost++;
        return;
    }
    kn_emu_finding *f = &findings[nfindings++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what, sizeof f->what, fmt, ap);
    va_end(ap);
    f->pc = pc;
    f->file = file;
    f->fn = fn;
    f->line = line;
    f->thread = cur;
}

/* The source file a kernel was compiled from: cc.c compiles <hash>.<pid>.c and then renames
 * it to <hash>.c, so a name of that form that is gone is looked for without the pid. */
static void emu_source(const char *file, char *out, size_t cap)
{
    snprintf(out, cap, "%s", file);
    FILE *f = fopen(out, "r");
    if (f) {
        fclose(f);
        return;
    }
    size_t n = strlen(out);
    if (n > 2 && !strcmp(out + n - 2, ".c")) {
        size_t d = n - 2;
        while (d > 0 && out[d - 1] >= '0' && out[d - 1] <= '9')
            d--;
        if (d > 0 && d < n - 2 && out[d - 1] == '.')
            memmove(out + d - 1, out + n - 2, 3);
    }
}

/* "in f, file.c:12" for a code address, from addr2line on the object dladdr names (the
 * debug information cc.c compiles the emulator dialect with); else the symbol. The file
 * and line go to file and *line when found. */
static void main_anchor(void) {} /* an address in this executable (cuda_emu.c is linked into it) */

static void emu_where(const void *pc, char *out, size_t cap, char *file, size_t fcap, int *line)
{
    Dl_info di, di_main;
    file[0] = 0;
    *line = 0;
    if (!dladdr(pc, &di) || !di.dli_fname) {
        snprintf(out, cap, "at %p", pc);
        return;
    }
    unsigned long off = (unsigned long)((uintptr_t)pc - 1 - (uintptr_t)di.dli_fbase);
    char cmd[1400], fn[256] = "", at[600] = "";
    char obj[64]; /* the executable's name may be a bare argv[0] (a re-exec'd worker): its /proc link */
    if (dladdr((void *)main_anchor, &di_main) && di_main.dli_fbase == di.dli_fbase)
        snprintf(obj, sizeof obj, "/proc/%ld/exe", (long)getpid());
    else
        obj[0] = 0;
    snprintf(cmd, sizeof cmd, "addr2line -f -e '%s' 0x%lx 2>/dev/null", obj[0] ? obj : di.dli_fname, off);
    FILE *p = popen(cmd, "r");
    if (p) {
        if (fgets(fn, sizeof fn, p) && fgets(at, sizeof at, p)) {
            fn[strcspn(fn, "\n")] = 0;
            at[strcspn(at, "\n ")] = 0;
        }
        pclose(p);
    }
    char *colon = strrchr(at, ':');
    if (at[0] && !strstr(at, "??") && colon) {
        *colon = 0;
        emu_source(at, file, fcap);
        *line = atoi(colon + 1);
        snprintf(out, cap, "in %s, %s:%d", fn, file, *line);
    } else
        snprintf(out, cap, "in %s+0x%lx (%s; no line: built without -g)", di.dli_sname ? di.dli_sname : "?",
                 (unsigned long)((uintptr_t)pc - (uintptr_t)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)), di.dli_fname);
}

/* Prints line `line` of file, indented, when it can be read. */
static void emu_print_line(const char *file, int line)
{
    FILE *f = file[0] && line > 0 ? fopen(file, "r") : NULL;
    char buf[400];
    for (int l = 1; f && fgets(buf, sizeof buf, f); l++)
        if (l == line) {
            buf[strcspn(buf, "\n")] = 0;
            fprintf(stderr, "    %d | %s\n", line, buf + strspn(buf, " "));
            break;
        }
    if (f)
        fclose(f);
}

/* Prints this block's findings; returns how many there were. */
static int emu_report(void)
{
    for (int i = 0; i < nfindings; i++) {
        const kn_emu_finding *f = &findings[i];
        kn_dim3 t = kn_emu_unflatten(f->thread, kn_emu_block_dim);
        char where[1600], file[600] = "";
        int line = f->line;
        if (f->pc)
            emu_where(f->pc, where, sizeof where, file, sizeof file, &line);
        else {
            if (f->file)
                emu_source(f->file, file, sizeof file);
            snprintf(where, sizeof where, "in %s, %s:%d", f->fn ? f->fn : "?", file[0] ? file : "line", f->line);
        }
        fprintf(stderr, "kn_emu: %s\n    kernel %s, block (%u,%u,%u), thread (%u,%u,%u), %s\n", f->what, emu_kernel,
                kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, t.x, t.y, t.z, where);
        emu_print_line(file, line);
    }
    if (nlost)
        fprintf(stderr, "kn_emu: ... and %d more findings in this block\n", nlost);
    int n = nfindings + nlost;
    nfindings = nlost = 0;
    return n;
}

/* ---- shared memory: windows and their shadow ---- */

typedef struct {
    unsigned w_epoch, w_wep;        /* the last write: its epoch, its warp's meetings then */
    unsigned r_epoch, r_warps;      /* the reads of r_epoch: a bit per warp that read */
    unsigned r_wep[2];              /* the warp meetings at r_lane's reads */
    unsigned short w_thread, r_first, r_other; /* r_other: a reader of another warp than r_first's */
    unsigned short r_lane[2];       /* the last two (distinct) readers */
} kn_emu_shadow;

static struct {
    uintptr_t lo, hi;
    kn_emu_shadow *shadow; /* a record per byte, allocated at the first access */
    int refs;
} windows[KN_EMU_WINDOWS];
static int nwindows;

void kn_emu_shared_window(const void *lo, const void *hi, int add)
{
    uintptr_t l = (uintptr_t)lo, h = (uintptr_t)hi;
    for (int i = 0; i < nwindows; i++)
        if (windows[i].lo == l && windows[i].hi == h) {
            if (add)
                windows[i].refs++;
            else if (--windows[i].refs == 0) {
                free(windows[i].shadow);
                windows[i] = windows[--nwindows];
            }
            return;
        }
    if (!add || h <= l)
        return;
    if (nwindows == KN_EMU_WINDOWS) {
        fprintf(stderr, "kn_emu: more than %d modules with shared memory: the newest is not checked\n", KN_EMU_WINDOWS);
        return;
    }
    windows[nwindows].lo = l;
    windows[nwindows].hi = h;
    windows[nwindows].shadow = NULL;
    windows[nwindows++].refs = 1;
}

/* The executable's own __shared__ arrays (cuda_emu.h puts them in the same section). */
extern char __start_kn_emu_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_kn_emu_shared[] __attribute__((weak, visibility("hidden")));

static struct { uintptr_t lo, hi; const char *name; } watched[KN_EMU_WATCHED];
static int nwatched;

void kn_emu_watch(const void *p, size_t bytes, const char *name)
{
    if (nwatched < KN_EMU_WATCHED && p)
        watched[nwatched++] = (__typeof__(watched[0])){(uintptr_t)p, (uintptr_t)p + bytes, name ? name : "?"};
}

/* Whether thread t's access, made when its warp had met `wep` times, may race with the current
 * thread's in this epoch: another thread, of another warp or of the same warp with no
 * meeting (shuffle, mma, ldmatrix) since. */
static int emu_unordered(unsigned t, unsigned wep)
{
    return t != cur && t != 0xffff && (t / 32 != cur / 32 || wep == warp_epoch[cur / 32]);
}

static void emu_race(int wi, uintptr_t a, size_t n, int write, const void *pc)
{
    if (!windows[wi].shadow) {
        windows[wi].shadow = calloc(windows[wi].hi - windows[wi].lo, sizeof *windows[wi].shadow);
        if (!windows[wi].shadow)
            return;
    }
    unsigned warp = cur / 32, wep = warp_epoch[warp];
    int reported = 0;
    uintptr_t base = windows[wi].lo;
    for (uintptr_t w = a - base; w < a + n - base; w++) { /* bytes: two bf16 halves of a word are apart */
        kn_emu_shadow *s = &windows[wi].shadow[w];
        unsigned other = 0xffff;
        const char *kind = NULL, *did = "wrote";
        if (s->w_epoch == emu_epoch && emu_unordered(s->w_thread, s->w_wep)) {
            other = s->w_thread;
            kind = write ? "write after write" : "read after write";
        } else if (write && s->r_epoch == emu_epoch) {
            if (s->r_warps & ~(1u << warp))
                other = s->r_first / 32u != warp ? s->r_first : s->r_other;
            for (int j = 0; j < 2 && other == 0xffff; j++)
                if (emu_unordered(s->r_lane[j], s->r_wep[j]))
                    other = s->r_lane[j];
            if (other != 0xffff) {
                kind = "write after read";
                did = "read";
            }
        }
        if (kind && !reported) {
            reported = 1; /* one finding for the access, however many bytes it spans */
            kn_dim3 o = kn_emu_unflatten(other, kn_emu_block_dim);
            emu_find(pc, NULL, NULL, 0, "shared-memory race (%s): this thread %s %zu bytes at shared offset %lu that "
                     "thread (%u,%u,%u) %s with no __syncthreads() between (nor, in one warp, a shuffle): a barrier "
                     "between them is missing", kind, write ? "writes" : "reads", n, (unsigned long)(a - base), o.x,
                     o.y, o.z, did);
        }
        if (kind) {
            s->w_epoch = s->r_epoch = 0; /* reported: one finding per byte and epoch */
            continue;
        }
        if (write) {
            s->w_epoch = emu_epoch;
            s->w_wep = wep;
            s->w_thread = (unsigned short)cur;
        } else {
            if (s->r_epoch != emu_epoch) {
                s->r_epoch = emu_epoch;
                s->r_warps = 0;
                s->r_first = (unsigned short)cur;
                s->r_other = s->r_lane[1] = 0xffff;
                s->r_lane[0] = (unsigned short)cur;
            } else {
                if (s->r_other == 0xffff && s->r_first / 32u != warp)
                    s->r_other = (unsigned short)cur;
                if (s->r_lane[0] != cur) {
                    s->r_lane[1] = s->r_lane[0];
                    s->r_wep[1] = s->r_wep[0];
                    s->r_lane[0] = (unsigned short)cur;
                }
            }
            s->r_wep[0] = wep;
            s->r_warps |= 1u << warp;
        }
    }
}

/* A hooked access out of bounds: the thread stops before it touches the memory (the hook
 * runs before the access), as a GPU kernel stops at an illegal address; the scheduler ends
 * the block. */
static int emu_faulted;
static void emu_fault(void)
{
    emu_faulted = 1;
    thread_state[cur] = FAULTED;
    swapcontext(&thread_ctx[cur], &sched_ctx); /* never resumed */
}

/* Every hooked load and store. Shared memory: the race shadow; near it, or near a watched
 * buffer and in none: out of bounds. Anything else (a thread's stack, a generated kernel's
 * buffers, which KN_EMU_AT checks) passes. */
__attribute__((unused)) /* only the hooks below call it; ASan builds leave them out */
static void emu_access(uintptr_t a, size_t n, int write, const void *pc)
{
    for (int i = 0; i < nwindows; i++) {
        uintptr_t lo = windows[i].lo, hi = windows[i].hi;
        if (a + n <= lo - KN_EMU_SLACK || a >= hi + KN_EMU_SLACK)
            continue;
        if (a >= lo && a + n <= hi) {
            emu_race(i, a, n, write, pc);
            return;
        }
        for (int j = 0; j < nwatched; j++)
            if (a >= watched[j].lo && a + n <= watched[j].hi)
                return;
        emu_find(pc, NULL, NULL, 0, "out-of-bounds shared-memory %s of %zu bytes, %ld bytes %s the block's %lu bytes of "
                 "shared memory", write ? "write" : "read", n, a >= lo ? (long)(a + n - hi) : (long)(lo - a),
                 a >= lo ? "past the end of" : "before", (unsigned long)(hi - lo));
        emu_fault();
    }
    int near = -1;
    for (int j = 0; j < nwatched; j++) {
        if (a >= watched[j].lo && a + n <= watched[j].hi)
            return;
        if (a + n > watched[j].lo - KN_EMU_SLACK && a < watched[j].hi + KN_EMU_SLACK)
            near = j;
    }
    if (near >= 0) {
        emu_find(pc, NULL, NULL, 0, "out-of-bounds global %s of %zu bytes at byte %ld of buffer %s (%lu bytes)",
                 write ? "write" : "read", n, (long)(a - watched[near].lo), watched[near].name,
                 (unsigned long)(watched[near].hi - watched[near].lo));
        emu_fault();
    }
}

/* Under ASan (make SAN=1 with gcc: __SANITIZE_ADDRESS__; clang's builds, the IR fuzzer
 * among them: __has_feature(address_sanitizer)) its runtime owns these names. */
#if defined(__SANITIZE_ADDRESS__)
#define KN_EMU_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KN_EMU_UNDER_ASAN 1
#endif
#endif
#if !defined(KN_EMU_UNDER_ASAN)
#define KN_EMU_HOOKS(n)                                                                                   \
    void __asan_load##n##_noabort(void *p);                                                               \
    void __asan_store##n##_noabort(void *p);                                                              \
    void __asan_load##n##_noabort(void *p) { if (emu_active) emu_access((uintptr_t)p, n, 0, __builtin_return_address(0)); } \
    void __asan_store##n##_noabort(void *p) { if (emu_active) emu_access((uintptr_t)p, n, 1, __builtin_return_address(0)); }
KN_EMU_HOOKS(1)
KN_EMU_HOOKS(2)
KN_EMU_HOOKS(4)
KN_EMU_HOOKS(8)
KN_EMU_HOOKS(16)
void __asan_loadN_noabort(void *p, size_t n);
void __asan_storeN_noabort(void *p, size_t n);
void __asan_handle_no_return(void);
void __asan_loadN_noabort(void *p, size_t n) { if (emu_active && n) emu_access((uintptr_t)p, n, 0, __builtin_return_address(0)); }
void __asan_storeN_noabort(void *p, size_t n) { if (emu_active && n) emu_access((uintptr_t)p, n, 1, __builtin_return_address(0)); }
void __asan_handle_no_return(void) {}
#endif

/* A generated kernel's index outside its buffer's view (KN_EMU_AT): reported, and the access
 * goes to a scratch element instead (reads give 0), so the kernel runs on without
 * corrupting memory and every finding of the block is seen. */
void *kn_emu_oob(long long i, long long lo, long long hi, int buf, int write, const char *file, const char *fn, int line)
{
    static double sink[2];
    emu_find(NULL, file, fn, line, "out-of-bounds global %s: element %lld of buffer p%d, whose view is elements [%lld, %lld)",
             write ? "write" : "read", i, buf, lo, hi);
    sink[0] = sink[1] = 0;
    return sink;
}

static void kn_emu_entry(void)
{
    cur_fn(cur_args);
    thread_state[cur] = DONE;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

void kn_emu_syncthreads_at(const char *fn, int line)
{
    bar_fn[cur] = fn;
    bar_line[cur] = line;
    thread_state[cur] = AT_BARRIER;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

void kn_emu_syncthreads(void) { kn_emu_syncthreads_at(NULL, 0); }

/* A warp shuffle: every lane posts its value, the warp meets, each reads its source
 * lane's value, the warp meets again (so no slot is overwritten before it is read). Values
 * travel as double, which holds a float or an int exactly. */
static double warp_slot[KN_EMU_MAX_THREADS];

static void kn_emu_warp_meet(void)
{
    thread_state[cur] = AT_WARP;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

static double kn_emu_shfl(double v, unsigned src_lane)
{
    warp_slot[cur] = v;
    kn_emu_warp_meet();
    unsigned base = cur / 32 * 32, src = base + src_lane;
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z;
    double r = src_lane < 32 && src < nt ? warp_slot[src] : v;
    kn_emu_warp_meet();
    return r;
}

/* Lanes past the warp's end keep their own value, as on the GPU. */
double kn_emu_shfl_down(double v, unsigned delta) { return kn_emu_shfl(v, cur % 32 + delta); }
double kn_emu_shfl_xor(double v, unsigned lanemask) { return kn_emu_shfl(v, (cur % 32) ^ lanemask); }
double kn_emu_shfl_idx(double v, unsigned src_lane) { return kn_emu_shfl(v, src_lane % 32); }

/* mma.sync: the lanes' fragment registers meet in mma_slot (a lane past the block's end
 * reads as zeros: every lane must take part). */
static struct { unsigned a[4], b[2]; } mma_slot[KN_EMU_MAX_THREADS];
static const unsigned short *ldm_slot[KN_EMU_MAX_THREADS];

static double emu_bits_f32(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* cvt.rna.tf32.f32: to 10 mantissa bits, ties away from zero; NaN and infinities stay. */
static double emu_tf32(unsigned u)
{
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & 0xffffe000u;
    return emu_bits_f32(u);
}

/* Element (row, k) of A or (k, col) of B from the lanes' slots, per the PTX ISA layouts. */
static double emu_mma_a(int kind, unsigned base, int row, int k)
{
    int g = row % 8, hi = row >= 8;
    if (kind == KN_EMU_MMA_TF32_16x8x8) /* a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) */
        return emu_tf32(mma_slot[base + g * 4 + k % 4].a[hi + 2 * (k >= 4)]);
    /* bf16: a0 (g, 2t..2t+1), a1 (g+8, ...), a2 (g, 2t+8..), a3 (g+8, 2t+8..) */
    unsigned r = mma_slot[base + g * 4 + (k % 8) / 2].a[hi + 2 * (k >= 8)];
    return emu_bits_f32((k % 2 ? r >> 16 : r & 0xffffu) << 16);
}

static double emu_mma_b(int kind, unsigned base, int k, int col)
{
    if (kind == KN_EMU_MMA_TF32_16x8x8) /* b0 (t, g), b1 (t+4, g) */
        return emu_tf32(mma_slot[base + col * 4 + k % 4].b[k >= 4]);
    unsigned r = mma_slot[base + col * 4 + (k % 8) / 2].b[k >= 8]; /* b0 (2t..2t+1, g), b1 (2t+8.., g) */
    return emu_bits_f32((k % 2 ? r >> 16 : r & 0xffffu) << 16);
}

void kn_emu_mma(int kind, float d[4], const unsigned a[4], const unsigned b[2], const float c[4])
{
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z, base = cur / 32 * 32;
    memcpy(mma_slot[cur].a, a, sizeof mma_slot[cur].a);
    memcpy(mma_slot[cur].b, b, sizeof mma_slot[cur].b);
    for (unsigned l = nt; l < base + 32 && l < KN_EMU_MAX_THREADS; l++)
        memset(&mma_slot[l], 0, sizeof mma_slot[l]);
    kn_emu_warp_meet();
    int g = (int)(cur % 32) / 4, t = (int)(cur % 4), kk = kind == KN_EMU_MMA_TF32_16x8x8 ? 8 : 16;
    float r[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >= 2), col = 2 * t + e % 2;
        double s = 0;
        for (int k = 0; k < kk; k++)
            s += emu_mma_a(kind, base, row, k) * emu_mma_b(kind, base, k, col);
        r[e] = (float)(s + c[e]);
    }
    kn_emu_warp_meet(); /* every lane has read the slots before any deposits again */
    memcpy(d, r, sizeof r);
}

/* Where thread t waits: "line 12 of f" or "an unmarked __syncthreads()". */
static void emu_site(unsigned t, char *out, size_t cap)
{
    if (bar_fn[t])
        snprintf(out, cap, "__syncthreads() in %s, line %d", bar_fn[t], bar_line[t]);
    else
        snprintf(out, cap, "a __syncthreads()");
}

static int same_site(unsigned a, unsigned b)
{
    return bar_line[a] == bar_line[b] && (bar_fn[a] == bar_fn[b] || (bar_fn[a] && bar_fn[b] && !strcmp(bar_fn[a], bar_fn[b])));
}

/* xorshift64*: the seeded thread order. */
static uint64_t emu_rng;
static unsigned emu_rand(unsigned n)
{
    emu_rng ^= emu_rng >> 12;
    emu_rng ^= emu_rng << 25;
    emu_rng ^= emu_rng >> 27;
    return (unsigned)((emu_rng * 2685821657736338717ull) >> 33) % n;
}

static const char *launch_name; /* kn_emu_launch_named's, for the next launch */

int kn_emu_launch_named(const char *name, void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args)
{
    launch_name = name;
    int rc = kn_emu_launch(fn, grid, block, args);
    launch_name = NULL;
    return rc;
}

int kn_emu_launch(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args)
{
    unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
    if (nt == 0 || nt > KN_EMU_MAX_THREADS || nb == 0) {
        fprintf(stderr, "kn_emu_launch: bad launch shape: block %ux%ux%u (1..%d threads), grid %ux%ux%u\n",
                block.x, block.y, block.z, KN_EMU_MAX_THREADS, grid.x, grid.y, grid.z);
        nwatched = 0;
        return -1;
    }
    int rc = 0;
    thread_ctx = calloc(nt, sizeof *thread_ctx);
    thread_state = calloc(nt, sizeof *thread_state);
    bar_fn = calloc(nt, sizeof *bar_fn);
    bar_line = calloc(nt, sizeof *bar_line);
    unsigned *order = calloc(nt, sizeof *order);
    char *stacks = malloc((size_t)nt * KN_EMU_STACK);
    if (!thread_ctx || !thread_state || !bar_fn || !bar_line || !order || !stacks) {
        fprintf(stderr, "kn_emu_launch: out of memory for %u thread stacks\n", nt);
        rc = -1;
        goto out;
    }
    if (__start_kn_emu_shared && (uintptr_t)__stop_kn_emu_shared > (uintptr_t)__start_kn_emu_shared) {
        static int mine;
        if (!mine++)
            kn_emu_shared_window(__start_kn_emu_shared, __stop_kn_emu_shared, 1);
    }
    Dl_info di;
    void *fp;
    memcpy(&fp, &fn, sizeof fp);
    snprintf(emu_kernel, sizeof emu_kernel, "%s",
             launch_name ? launch_name : dladdr(fp, &di) && di.dli_sname ? di.dli_sname : "(a static function)");
    const char *seed = getenv("KN_EMU_SEED");
    uint64_t seed0 = seed && *seed ? strtoull(seed, NULL, 0) : 1;
    cur_fn = fn;
    cur_args = args;
    kn_emu_block_dim = block;
    kn_emu_grid_dim = grid;
    nfindings = nlost = emu_faulted = 0;
    emu_active = 1;
    for (unsigned b = 0; b < nb && rc == 0; b++) {
        for (unsigned t = 0; t < nt; t++) {
            getcontext(&thread_ctx[t]);
            thread_ctx[t].uc_stack.ss_sp = stacks + (size_t)t * KN_EMU_STACK;
            thread_ctx[t].uc_stack.ss_size = KN_EMU_STACK;
            thread_ctx[t].uc_link = &sched_ctx;
            makecontext(&thread_ctx[t], kn_emu_entry, 0);
            thread_state[t] = RUNNING;
            order[t] = t;
        }
        kn_emu_block_idx = kn_emu_unflatten(b, grid);
        emu_rng = (seed0 + b) * 0x9E3779B97F4A7C15ull | 1;
        emu_epoch++; /* a new block: new shared memory */
        for (;;) {
            unsigned waiting = 0, done = 0;
            for (unsigned i = nt - 1; i > 0; i--) { /* this round's order: a seeded shuffle */
                unsigned j = emu_rand(i + 1), o = order[i];
                order[i] = order[j];
                order[j] = o;
            }
            for (unsigned i = 0; i < nt; i++) {
                cur = order[i];
                if (thread_state[cur] != RUNNING)
                    continue;
                kn_emu_thread_idx = kn_emu_unflatten(cur, block);
                swapcontext(&sched_ctx, &thread_ctx[cur]);
            }
            for (unsigned t = 0; t < nt; t++) {
                waiting += thread_state[t] == AT_BARRIER;
                done += thread_state[t] == DONE;
            }
            if (done == nt || emu_faulted)
                break;
            int moved = 0; /* open every warp whose live lanes all wait at a shuffle */
            for (unsigned w = 0; w < nt; w += 32) {
                unsigned end = w + 32 < nt ? w + 32 : nt, at = 0, live = 0;
                for (unsigned t = w; t < end; t++) {
                    at += thread_state[t] == AT_WARP;
                    live += thread_state[t] != DONE;
                }
                if (at > 0 && at == live) {
                    warp_epoch[w / 32]++;
                    for (unsigned t = w; t < end; t++)
                        if (thread_state[t] == AT_WARP)
                            thread_state[t] = RUNNING;
                    moved = 1;
                }
            }
            if (moved)
                continue;
            unsigned w0 = 0, gone = 0, split = nt;
            while (w0 < nt && thread_state[w0] != AT_BARRIER)
                w0++;
            for (unsigned t = 0; t < nt; t++) {
                if (thread_state[t] == DONE && gone == 0)
                    gone = t + 1;
                if (thread_state[t] == AT_BARRIER && split == nt && !same_site(t, w0))
                    split = t;
            }
            char s0[200], s1[200];
            if (w0 < nt)
                emu_site(w0, s0, sizeof s0);
            kn_dim3 tw = kn_emu_unflatten(w0 < nt ? w0 : 0, block);
            if (done > 0 || waiting + done != nt) {
                kn_dim3 tg = kn_emu_unflatten(gone ? gone - 1 : 0, block);
                fprintf(stderr, "kn_emu: deadlock: %u threads wait at __syncthreads() that %u returned threads never "
                        "reach (a barrier in divergent code?)\n    kernel %s, block (%u,%u,%u): thread (%u,%u,%u) "
                        "waits at %s; thread (%u,%u,%u) %s\n",
                        waiting, done, emu_kernel, kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, tw.x,
                        tw.y, tw.z, w0 < nt ? s0 : "(none)", tg.x, tg.y, tg.z,
                        gone ? "returned" : "waits at a warp shuffle");
                rc = -1;
                break;
            }
            if (split < nt) {
                kn_dim3 ts = kn_emu_unflatten(split, block);
                emu_site(split, s1, sizeof s1);
                fprintf(stderr, "kn_emu: divergent barrier: the threads of a block wait at different __syncthreads()\n"
                        "    kernel %s, block (%u,%u,%u): thread (%u,%u,%u) waits at %s; thread (%u,%u,%u) at %s\n",
                        emu_kernel, kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, tw.x, tw.y, tw.z, s0,
                        ts.x, ts.y, ts.z, s1);
                rc = -1;
                break;
            }
            emu_epoch++; /* the barrier opens */
            for (unsigned t = 0; t < nt; t++)
                thread_state[t] = RUNNING;
        }
        if (emu_report() > 0)
            rc = -1;
    }
out:
    emu_active = 0;
    nwatched = 0;
    free(stacks);
    free(order);
    free(bar_line);
    free(bar_fn);
    free(thread_state);
    free(thread_ctx);
    thread_ctx = NULL;
    thread_state = NULL;
    bar_fn = NULL;
    bar_line = NULL;
    return rc;
}

void kn_emu_ldmatrix(unsigned *r, int n, int trans, const unsigned short *row)
{
    unsigned base = cur / 32 * 32, g = cur % 32 / 4, t = cur % 4;
    ldm_slot[cur] = row;
    kn_emu_warp_meet();
    unsigned out[4] = {0};
    for (int i = 0; i < n && i < 4; i++) {
        const unsigned short *lo = trans ? ldm_slot[base + 8 * i + 2 * t] + g : ldm_slot[base + 8 * i + g] + 2 * t;
        const unsigned short *hi = trans ? ldm_slot[base + 8 * i + 2 * t + 1] + g : lo + 1;
        out[i] = (unsigned)*lo | (unsigned)*hi << 16;
    }
    kn_emu_warp_meet();
    for (int i = 0; i < n && i < 4; i++)
        r[i] = out[i];
}
