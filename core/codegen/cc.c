/* cc.c — compile generated C with the system compiler, cache it on disk, load it.
 *
 * The cache key is a 64-bit FNV-1a hash of everything that decides the machine code: the
 * source, the flags, the compiler's name, this machine's ISA and CPU model (-march=native
 * makes the object machine-specific) and the renderer's version. A hit costs one dlopen
 * (well under a millisecond); a miss, one compiler run. Several processes (MPI ranks) may
 * compile the same kernels at once: each writes its own temporary file and renames it into
 * place, so a reader never sees half an object.
 *
 * The generated code is compiled with the warnings kiln itself uses, as errors, and with
 * the sanitizers when kiln is built with them (make SAN=1), so ASan and UBSan watch the
 * generated kernels too. Source in the CUDA emulator's dialect (it defines KN_EMU_INSTRUMENT)
 * is compiled with the emulator's access hooks instead (KN_EMU_HOOK_FLAGS, codegen/emu_dialect.h), so
 * the emulator sees its shared-memory races and out-of-bounds accesses. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/codegen.h"
#include "kiln/gemm.h"
#include "codegen/emu_dialect.h"

#define KN_CC_VERSION "kiln-c-1" /* bump when the renderer's output changes meaning */

struct kn_cc_module { void *handle; };

static const char *cc_name(void) {
    const char *c = getenv("KILN_CC");
    return c && *c ? c : "cc";
}

static bool on_path(const char *prog) {
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char buf[1024];
    for (const char *p = path; *p;) {
        const char *e = strchr(p, ':');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l > 0 && l + strlen(prog) + 2 < sizeof buf) {
            memcpy(buf, p, l);
            buf[l] = '/';
            strcpy(buf + l + 1, prog);
            if (access(buf, X_OK) == 0) return true;
        }
        if (!e) break;
        p = e + 1;
    }
    return false;
}

bool kn_cc_available(void) { return on_path(cc_name()); }

/* glibc's vector math library with the SIMD variants of expf/logf/tanhf (and the double
 * ones) the prelude declares: glibc 2.35 or later on x86-64. Without it the kernels call
 * the scalar functions (same results within a few ulp, slower). */
bool kn_cc_vector_math(void) {
    static int have = -1;
    if (have < 0) {
        have = 0;
#if defined(__x86_64__)
        void *h = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            static const char *const need[] = {"_ZGVbN4v_tanhf", "_ZGVbN4v_expf", "_ZGVbN4v_logf",
                                               "_ZGVbN2v_tanh", "_ZGVbN2v_exp", "_ZGVbN2v_log"};
            have = 1;
            for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) have &= dlsym(h, need[i]) != NULL;
            dlclose(h);
        }
#endif
    }
    return have == 1;
}

static const char *const kn_cc_flags[] = {
    "-std=c11", "-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-Wall", "-Wextra",
    "-Werror",
#if defined(__SANITIZE_ADDRESS__)
    "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
#endif
};
#define KN_CC_NFLAGS (sizeof kn_cc_flags / sizeof kn_cc_flags[0])
#if defined(__SANITIZE_ADDRESS__) /* ASan's own checks already watch the kernels */
static const char *const kn_cc_emu_flags[] = {"-g"};
#else
static const char *const kn_cc_emu_flags[] = {KN_EMU_HOOK_FLAGS};
#endif
#define KN_CC_NEMU (sizeof kn_cc_emu_flags / sizeof kn_cc_emu_flags[0])

/* Whether src is in the CUDA emulator's dialect (its prelude's marker). */
static bool emu_dialect(const char *src) { return strstr(src, "\n#define KN_EMU_INSTRUMENT 1\n") != NULL; }

static uint64_t fnv(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (h ^ 0xff) * 1099511628211ull; /* a separator, so "ab"+"c" != "a"+"bc" */
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static kn_status write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return kn_error(KN_ERR_IO, "kn_cc_compile: cannot write %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? KN_OK : kn_error(KN_ERR_IO, "kn_cc_compile: cannot write %s", path);
}

/* Run the compiler: src -> so, its output into log. 0 on success, 127 when it could not be
 * started, else its exit status. */
static int run_cc(const char *src, const char *so, const char *log, bool emu) {
    const char *argv[KN_CC_NFLAGS + KN_CC_NEMU + 8];
    int a = 0;
    argv[a++] = cc_name();
    for (size_t i = 0; i < KN_CC_NFLAGS; i++) argv[a++] = kn_cc_flags[i];
    for (size_t i = 0; emu && i < KN_CC_NEMU; i++) argv[a++] = kn_cc_emu_flags[i];
    argv[a++] = "-o";
    argv[a++] = so;
    argv[a++] = src;
    if (kn_cc_vector_math()) argv[a++] = "-lmvec";
    argv[a++] = "-lm";
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid < 0) return 127;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void read_log(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

kn_status kn_cc_compile(const char *src, kn_cc_module **out, kn_cc_info *info) {
    if (!src || !out) return kn_error(KN_ERR_ARG, "kn_cc_compile: NULL argument");
    *out = NULL;
    kn_cc_info inf = {0};
    double t0 = now_ms();
    if (!kn_cc_available())
        return kn_error(KN_ERR_UNSUPPORTED, "kn_cc_compile: no C compiler: '%s' is not on PATH (install gcc, or set "
                        "KILN_CC)", cc_name());
    char dir[600], machine[96];
    KN_TRY(kn_gemm_cache_dir(dir, sizeof dir - 16));
    strcat(dir, "/kernels");
    KN_TRY(kn_cache_mkdirs(dir));
    kn_gemm_machine(machine, sizeof machine);
    uint64_t h = fnv(1469598103934665603ull, KN_CC_VERSION);
    h = fnv(h, cc_name());
    h = fnv(h, machine);
    for (size_t i = 0; i < KN_CC_NFLAGS; i++) h = fnv(h, kn_cc_flags[i]);
    for (size_t i = 0; emu_dialect(src) && i < KN_CC_NEMU; i++) h = fnv(h, kn_cc_emu_flags[i]);
    h = fnv(h, kn_cc_vector_math() ? "mvec" : "scalar");
    h = fnv(h, src);
    char cpath[700], so[700], tmp[760], log[760];
    snprintf(cpath, sizeof cpath, "%s/%016llx.c", dir, (unsigned long long)h);
    snprintf(so, sizeof so, "%s/%016llx.so", dir, (unsigned long long)h);
    snprintf(inf.path, sizeof inf.path, "%s", cpath);
    if (access(so, R_OK) == 0) inf.cached = true;
    else {
        snprintf(tmp, sizeof tmp, "%s/%016llx.%ld.tmp.so", dir, (unsigned long long)h, (long)getpid());
        snprintf(log, sizeof log, "%s/%016llx.%ld.log", dir, (unsigned long long)h, (long)getpid());
        char csrc[760];
        snprintf(csrc, sizeof csrc, "%s/%016llx.%ld.c", dir, (unsigned long long)h, (long)getpid());
        KN_TRY(write_file(csrc, src));
        int rc = run_cc(csrc, tmp, log, emu_dialect(src));
        if (rc != 0) {
            char msg[3000];
            read_log(log, msg, sizeof msg);
            rename(csrc, cpath); /* keep the source the message names */
            unlink(log);
            unlink(tmp);
            if (rc == 127 && !msg[0])
                return kn_error(KN_ERR_UNSUPPORTED, "kn_cc_compile: could not run the C compiler '%s'", cc_name());
            return kn_error(KN_ERR_INTERNAL, "kn_cc_compile: compiling the generated %s with %s failed (exit %d):\n%s",
                            cpath, cc_name(), rc, msg);
        }
        unlink(log);
        rename(csrc, cpath);
        if (rename(tmp, so) != 0) {
            unlink(tmp);
            return kn_error(KN_ERR_IO, "kn_cc_compile: cannot move the object into %s: %s", so, strerror(errno));
        }
    }
    kn_cc_module *m = kn_calloc(1, sizeof *m);
    if (!m) return kn_error(KN_ERR_OOM, "kn_cc_compile: out of memory");
    m->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!m->handle) {
        const char *e = dlerror();
        kn_free(m);
        return kn_error(KN_ERR_IO, "kn_cc_compile: cannot load %s: %s", so, e ? e : "?");
    }
    inf.ms = now_ms() - t0;
    if (info) *info = inf;
    *out = m;
    return KN_OK;
}

kn_status kn_cc_cache_path(const char *ext, const char *const *keys, int nkeys, char *out, size_t cap) {
    if (!ext || !out || (nkeys > 0 && !keys)) return kn_error(KN_ERR_ARG, "kn_cc_cache_path: NULL argument");
    char dir[600];
    KN_TRY(kn_gemm_cache_dir(dir, sizeof dir - 16));
    strcat(dir, "/kernels");
    KN_TRY(kn_cache_mkdirs(dir));
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < nkeys; i++) h = fnv(h, keys[i] ? keys[i] : "");
    int w = snprintf(out, cap, "%s/%016llx.%s", dir, (unsigned long long)h, ext);
    return w > 0 && (size_t)w < cap ? KN_OK : kn_error(KN_ERR_ARG, "kn_cc_cache_path: the path does not fit");
}

void *kn_cc_symbol(const kn_cc_module *m, const char *name) { return m && name ? dlsym(m->handle, name) : NULL; }

void kn_cc_free(kn_cc_module *m) {
    if (!m) return;
    if (m->handle) dlclose(m->handle);
    kn_free(m);
}
