/* cuda_emu_check.c: the CUDA emulator's checks, the CPU's compute-sanitizer (memcheck,
 * racecheck), so that a machine without a GPU finds the same bugs. The scheduler
 * (cuda_emu.c) runs the threads and finds deadlocks and divergent barriers; this file:
 *   - out-of-bounds global accesses of generated kernels: they index their buffers through
 *     KN_EMU_AT (the renderer knows each buffer's view); an index outside it lands in
 *     kn_emu_oob, reported with the line, and goes to a scratch element;
 *   - in code compiled with the emulator's access hooks (cc.c does it for the emulator
 *     dialect, KN_EMU_INSTRUMENT; gcc -fsanitize=kernel-address makes every load and store
 *     call __asan_loadN/storeN_noabort, defined below), every access, byte for byte: an
 *     access to the block's shared memory (the kn_emu_shared section every __shared__ array
 *     is put in, kn_emu_shared_window) goes through a shadow record of which thread last
 *     wrote each byte and which threads read it since the last barrier: a write and another
 *     thread's read or write of the same byte with no barrier between (nor, within a warp, a
 *     shuffle) is a race; an access just outside the shared memory or a buffer given to
 *     kn_emu_watch is out of bounds, and the thread stops there (kn_emu_fault).
 * Findings are kept per block and printed by kn_emu_report, each naming the kernel, the
 * block, the thread and the source line (addr2line on the hooks' return address, when the
 * code has debug information). */
#define _GNU_SOURCE
#include "cuda_emu.h"
#include "cuda_emu_state.h"
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { KN_EMU_FINDINGS = 6, KN_EMU_SLACK = 256, KN_EMU_WINDOWS = 64, KN_EMU_WATCHED = 64 };

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
    f->thread = kn_emu_cur;
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
static void main_anchor(void) {} /* an address in this executable (the emulator is linked into it) */

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

int kn_emu_report(void)
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
        fprintf(stderr, "kn_emu: %s\n    kernel %s, block (%u,%u,%u), thread (%u,%u,%u), %s\n", f->what, kn_emu_kernel,
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
    return t != kn_emu_cur && t != 0xffff && (t / 32 != kn_emu_cur / 32 || wep == kn_emu_warp_epoch[kn_emu_cur / 32]);
}

static void emu_race(int wi, uintptr_t a, size_t n, int write, const void *pc)
{
    if (!windows[wi].shadow) {
        windows[wi].shadow = calloc(windows[wi].hi - windows[wi].lo, sizeof *windows[wi].shadow);
        if (!windows[wi].shadow)
            return;
    }
    unsigned warp = kn_emu_cur / 32, wep = kn_emu_warp_epoch[warp];
    int reported = 0;
    uintptr_t base = windows[wi].lo;
    for (uintptr_t w = a - base; w < a + n - base; w++) { /* bytes: two bf16 halves of a word are apart */
        kn_emu_shadow *s = &windows[wi].shadow[w];
        unsigned other = 0xffff;
        const char *kind = NULL, *did = "wrote";
        if (s->w_epoch == kn_emu_epoch && emu_unordered(s->w_thread, s->w_wep)) {
            other = s->w_thread;
            kind = write ? "write after write" : "read after write";
        } else if (write && s->r_epoch == kn_emu_epoch) {
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
            s->w_epoch = kn_emu_epoch;
            s->w_wep = wep;
            s->w_thread = (unsigned short)kn_emu_cur;
        } else {
            if (s->r_epoch != kn_emu_epoch) {
                s->r_epoch = kn_emu_epoch;
                s->r_warps = 0;
                s->r_first = (unsigned short)kn_emu_cur;
                s->r_other = s->r_lane[1] = 0xffff;
                s->r_lane[0] = (unsigned short)kn_emu_cur;
            } else {
                if (s->r_other == 0xffff && s->r_first / 32u != warp)
                    s->r_other = (unsigned short)kn_emu_cur;
                if (s->r_lane[0] != kn_emu_cur) {
                    s->r_lane[1] = s->r_lane[0];
                    s->r_wep[1] = s->r_wep[0];
                    s->r_lane[0] = (unsigned short)kn_emu_cur;
                }
            }
            s->r_wep[0] = wep;
            s->r_warps |= 1u << warp;
        }
    }
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
        kn_emu_fault();
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
        kn_emu_fault();
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
    void __asan_load##n##_noabort(void *p) { if (kn_emu_active) emu_access((uintptr_t)p, n, 0, __builtin_return_address(0)); } \
    void __asan_store##n##_noabort(void *p) { if (kn_emu_active) emu_access((uintptr_t)p, n, 1, __builtin_return_address(0)); }
KN_EMU_HOOKS(1)
KN_EMU_HOOKS(2)
KN_EMU_HOOKS(4)
KN_EMU_HOOKS(8)
KN_EMU_HOOKS(16)
void __asan_loadN_noabort(void *p, size_t n);
void __asan_storeN_noabort(void *p, size_t n);
void __asan_handle_no_return(void);
void __asan_loadN_noabort(void *p, size_t n) { if (kn_emu_active && n) emu_access((uintptr_t)p, n, 0, __builtin_return_address(0)); }
void __asan_storeN_noabort(void *p, size_t n) { if (kn_emu_active && n) emu_access((uintptr_t)p, n, 1, __builtin_return_address(0)); }
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

void kn_emu_checks_begin(void)
{
    if (__start_kn_emu_shared && (uintptr_t)__stop_kn_emu_shared > (uintptr_t)__start_kn_emu_shared) {
        static int mine;
        if (!mine++)
            kn_emu_shared_window(__start_kn_emu_shared, __stop_kn_emu_shared, 1);
    }
    nfindings = nlost = 0;
}

void kn_emu_checks_end(void) { nwatched = 0; }
