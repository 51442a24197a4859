/* cuda_nvrtc.cu — compile generated CUDA C with NVRTC (kiln/cuda.h: kn_cuda_nvrtc_compile).
 *
 * NVRTC is a library: it compiles CUDA C to PTX in the process, with no GPU and no nvcc, so
 * the test suite compiles every kernel the CUDA renderer emits on a machine without a GPU
 * (tests/core/test_codegen.c). A compile error comes back with NVRTC's log and the kernel's
 * name. cuda_module.cu asks for a cubin (SASS for the device's sm_XY) and loads it. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/cuda.h"

/* NVRTC is opened at run time, on first use, not linked: a machine with the CUDA runtime
 * but without NVRTC (a driver-only install, a slim container) still runs kiln, and only
 * the compiled GPU program says what is missing. $KILN_NVRTC names the library to open
 * (default libnvrtc.so.<CUDA major>, then libnvrtc.so). */
typedef struct kn_nvrtc_api {
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
    nvrtcResult (*ptx)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
    const char *(*error_string)(nvrtcResult);
    nvrtcResult (*version)(int *, int *);
} kn_nvrtc_api;

static kn_status nvrtc_api(const kn_nvrtc_api **out) {
    static kn_nvrtc_api api;
    static void *lib;
    if (lib) {
        *out = &api;
        return KN_OK;
    }
    char dflt[40];
    snprintf(dflt, sizeof dflt, "libnvrtc.so.%d", CUDART_VERSION / 1000);
    const char *want = getenv("KILN_NVRTC");
    const char *names[2] = {want && *want ? want : dflt, want && *want ? NULL : "libnvrtc.so"};
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++)
        if (names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return kn_error(KN_ERR_UNSUPPORTED, "NVRTC is not installed (%s: %s): the compiled GPU program compiles its kernels "
                        "with it; install the CUDA toolkit's NVRTC (Debian: cuda-nvrtc-%d-%d), set KILN_NVRTC to its path, "
                        "or run --mode interp", names[0], dlerror(), CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    struct { void **slot; const char *name; } syms[] = {
        {(void **)&api.create, "nvrtcCreateProgram"}, {(void **)&api.compile, "nvrtcCompileProgram"},
        {(void **)&api.log_size, "nvrtcGetProgramLogSize"}, {(void **)&api.log, "nvrtcGetProgramLog"},
        {(void **)&api.ptx_size, "nvrtcGetPTXSize"}, {(void **)&api.ptx, "nvrtcGetPTX"},
        {(void **)&api.cubin_size, "nvrtcGetCUBINSize"}, {(void **)&api.cubin, "nvrtcGetCUBIN"},
        {(void **)&api.destroy, "nvrtcDestroyProgram"}, {(void **)&api.error_string, "nvrtcGetErrorString"},
        {(void **)&api.version, "nvrtcVersion"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            dlclose(h);
            return kn_error(KN_ERR_UNSUPPORTED, "%s has no %s: not the NVRTC kiln was built for (CUDA %d.%d)", names[0],
                            syms[i].name, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        }
    lib = h;
    *out = &api;
    return KN_OK;
}

extern "C" kn_status kn_cuda_nvrtc_version(int *major, int *minor) {
    const kn_nvrtc_api *n;
    KN_TRY(nvrtc_api(&n));
    n->version(major, minor);
    return KN_OK;
}

extern "C" kn_status kn_cuda_nvrtc_compile(const char *src, const char *name, int major, int minor, char **ptx,
                                           size_t *ptx_len) {
    return kn_cuda_nvrtc_build(src, name, major, minor, false, ptx, ptx_len);
}

extern "C" kn_status kn_cuda_nvrtc_build(const char *src, const char *name, int major, int minor, bool cubin, char **ptx,
                                         size_t *ptx_len) {
    if (!src || !name || !ptx || !ptx_len) return kn_error(KN_ERR_ARG, "kn_cuda_nvrtc_compile: NULL argument");
    const kn_nvrtc_api *nv;
    KN_TRY(nvrtc_api(&nv));
    *ptx = NULL;
    *ptx_len = 0;
    nvrtcProgram prog;
    nvrtcResult r = nv->create(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return kn_error(KN_ERR_DEVICE, "kn_cuda_nvrtc_compile: nvrtcCreateProgram(%s): %s", name, nv->error_string(r));
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d%d", cubin ? "sm" : "compute", major, minor);
    const char *opts[] = {arch, "--std=c++17", "-default-device"};
    r = nv->compile(prog, 3, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nv->log_size(prog, &n);
        char *log = (char *)kn_malloc(n + 1);
        if (log) {
            nv->log(prog, log);
            log[n] = 0;
        }
        kn_status st = kn_error(KN_ERR_INTERNAL, "kn_cuda_nvrtc_compile: NVRTC could not compile %s for compute_%d%d "
                                "(%s):\n%s", name, major, minor, nv->error_string(r), log ? log : "(no log)");
        kn_free(log);
        nv->destroy(&prog);
        return st;
    }
    size_t n = 0;
    r = cubin ? nv->cubin_size(prog, &n) : nv->ptx_size(prog, &n);
    if (r != NVRTC_SUCCESS) {
        nv->destroy(&prog);
        return kn_error(KN_ERR_DEVICE, "kn_cuda_nvrtc_compile: %s: %s", name, nv->error_string(r));
    }
    char *p = (char *)kn_malloc(n + 1);
    if (!p) {
        nv->destroy(&prog);
        return kn_error(KN_ERR_OOM, "kn_cuda_nvrtc_compile: out of memory for %zu bytes of PTX", n);
    }
    if (cubin) nv->cubin(prog, p);
    else nv->ptx(prog, p);
    p[n] = 0;
    nv->destroy(&prog);
    *ptx = p;
    *ptx_len = n;
    return KN_OK;
}
