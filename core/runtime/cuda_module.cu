/* cuda_module.cu — generated CUDA kernels on the GPU: NVRTC to a cubin (cached on disk),
 * loaded with the runtime's library API, launched with cudaLaunchKernel (kiln/cuda.h).
 *
 * NVRTC compiles straight to SASS for the device's architecture (sm_90 on an H100), so a
 * load is only a copy onto the device; the cubin is kept in the kernel cache beside the
 * CPU's shared objects, keyed by the source, the architecture and NVRTC's version, and the
 * second compile of the same program is a file read. cudaLibraryLoadData (CUDA 12+) needs no
 * driver-API linking: kiln stays linked to libcudart only, so a machine with no GPU driver
 * still starts it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cuda_impl.h"
extern "C" {
#include "kiln/codegen.h"
#include "kiln/gemm.h"
}

struct kn_cuda_module {
    cudaLibrary_t lib;
    int device;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

extern "C" kn_status kn_cuda_limits_get(int device, kn_cuda_limits *lim, int *major, int *minor) {
    cudaDeviceProp pr;
    KN_CUDA_TRY(cudaGetDeviceProperties(&pr, device));
    if (lim) {
        lim->sm_count = pr.multiProcessorCount;
        lim->max_threads = pr.maxThreadsPerBlock;
        lim->threads_per_sm = pr.maxThreadsPerMultiProcessor;
    }
    if (major) *major = pr.major;
    if (minor) *minor = pr.minor;
    return KN_OK;
}

/* The cubin of src for sm_<major><minor>: from the cache, or NVRTC then into the cache. */
static kn_status cubin_for(const char *src, const char *name, int major, int minor, char **bin, size_t *n, bool *cached) {
    int vmaj = 0, vmin = 0;
    KN_TRY(kn_cuda_nvrtc_version(&vmaj, &vmin));
    char arch[32], ver[32], path[800];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    snprintf(ver, sizeof ver, "nvrtc-%d.%d", vmaj, vmin);
    const char *keys[] = {"kiln-cuda-1", arch, ver, src};
    KN_TRY(kn_cc_cache_path("cubin", keys, 4, path, sizeof path));
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *b = sz > 0 ? (char *)kn_malloc((size_t)sz) : NULL;
        bool ok = b && fread(b, 1, (size_t)sz, f) == (size_t)sz;
        fclose(f);
        if (ok) {
            *bin = b;
            *n = (size_t)sz;
            *cached = true;
            return KN_OK;
        }
        kn_free(b); /* unreadable: compile again */
    }
    KN_TRY(kn_cuda_nvrtc_build(src, name, major, minor, true, bin, n));
    char tmp[840];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    if ((f = fopen(tmp, "wb"))) { /* a cache we cannot write only costs the next compile */
        bool ok = fwrite(*bin, 1, *n, f) == *n;
        ok &= fclose(f) == 0;
        if (!ok || rename(tmp, path) != 0) unlink(tmp);
    }
    *cached = false;
    return KN_OK;
}

extern "C" kn_status kn_cuda_module_load(int device, const char *src, const char *name, kn_cuda_module **out,
                                         bool *cached, double *ms) {
    if (!src || !name || !out) return kn_error(KN_ERR_ARG, "kn_cuda_module_load: NULL argument");
    *out = NULL;
    double t0 = now_ms();
    int major = 0, minor = 0;
    KN_CUDA_TRY(cudaSetDevice(device));
    KN_TRY(kn_cuda_limits_get(device, NULL, &major, &minor));
    char *bin = NULL;
    size_t n = 0;
    bool hit = false;
    KN_TRY(cubin_for(src, name, major, minor, &bin, &n, &hit));
    kn_cuda_module *m = (kn_cuda_module *)kn_calloc(1, sizeof *m);
    if (!m) {
        kn_free(bin);
        return kn_error(KN_ERR_OOM, "kn_cuda_module_load: out of memory");
    }
    m->device = device;
    cudaError_t e = cudaLibraryLoadData(&m->lib, bin, NULL, NULL, 0, NULL, NULL, 0);
    kn_free(bin);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        kn_free(m);
        return kn_error(KN_ERR_DEVICE, "kn_cuda_module_load: cudaLibraryLoadData(%s, sm_%d%d): %s", name, major, minor,
                        cudaGetErrorString(e));
    }
    if (cached) *cached = hit;
    if (ms) *ms = now_ms() - t0;
    *out = m;
    return KN_OK;
}

extern "C" kn_status kn_cuda_module_kernel(const kn_cuda_module *m, const char *name, void **fn) {
    if (!m || !name || !fn) return kn_error(KN_ERR_ARG, "kn_cuda_module_kernel: NULL argument");
    cudaKernel_t k;
    cudaError_t e = cudaLibraryGetKernel(&k, m->lib, name);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_INTERNAL, "kn_cuda_module_kernel: no kernel %s in the module: %s", name, cudaGetErrorString(e));
    }
    *fn = (void *)k;
    return KN_OK;
}

extern "C" kn_status kn_cuda_launch_kernel(void *fn, const char *name, kn_cuda_launch l, void **args) {
    cudaError_t e = cudaLaunchKernel((const void *)fn, dim3(l.grid), dim3(l.block), args, 0, knc_stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "launching generated kernel %s (grid %u, block %u): %s", name, l.grid, l.block,
                        cudaGetErrorString(e));
    }
    return KN_OK;
}

extern "C" void kn_cuda_module_free(kn_cuda_module *m) {
    if (!m) return;
    KN_CUDA_WARN(cudaLibraryUnload(m->lib));
    kn_free(m);
}
