/* cuda_nvrtc.cu — compile generated CUDA C with NVRTC (kiln/cuda.h: kn_cuda_nvrtc_compile).
 *
 * NVRTC is a library: it compiles CUDA C to PTX in the process, with no GPU and no nvcc, so
 * the test suite compiles every kernel the CUDA renderer emits on a machine without a GPU
 * (tests/core/test_codegen.c). A compile error comes back with NVRTC's log and the kernel's
 * name. cuda_module.cu asks for a cubin (SASS for the device's sm_XY) and loads it. */
#include <nvrtc.h>
#include <stdio.h>
#include <string.h>

#include "kiln/cuda.h"

extern "C" kn_status kn_cuda_nvrtc_compile(const char *src, const char *name, int major, int minor, char **ptx,
                                           size_t *ptx_len) {
    return kn_cuda_nvrtc_build(src, name, major, minor, false, ptx, ptx_len);
}

extern "C" kn_status kn_cuda_nvrtc_build(const char *src, const char *name, int major, int minor, bool cubin, char **ptx,
                                         size_t *ptx_len) {
    if (!src || !name || !ptx || !ptx_len) return kn_error(KN_ERR_ARG, "kn_cuda_nvrtc_compile: NULL argument");
    *ptx = NULL;
    *ptx_len = 0;
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return kn_error(KN_ERR_DEVICE, "kn_cuda_nvrtc_compile: nvrtcCreateProgram(%s): %s", name, nvrtcGetErrorString(r));
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d%d", cubin ? "sm" : "compute", major, minor);
    const char *opts[] = {arch, "--std=c++17", "-default-device"};
    r = nvrtcCompileProgram(prog, 3, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = (char *)kn_malloc(n + 1);
        if (log) {
            nvrtcGetProgramLog(prog, log);
            log[n] = 0;
        }
        kn_status st = kn_error(KN_ERR_INTERNAL, "kn_cuda_nvrtc_compile: NVRTC could not compile %s for compute_%d%d "
                                "(%s):\n%s", name, major, minor, nvrtcGetErrorString(r), log ? log : "(no log)");
        kn_free(log);
        nvrtcDestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    r = cubin ? nvrtcGetCUBINSize(prog, &n) : nvrtcGetPTXSize(prog, &n);
    if (r != NVRTC_SUCCESS) {
        nvrtcDestroyProgram(&prog);
        return kn_error(KN_ERR_DEVICE, "kn_cuda_nvrtc_compile: %s: %s", name, nvrtcGetErrorString(r));
    }
    char *p = (char *)kn_malloc(n + 1);
    if (!p) {
        nvrtcDestroyProgram(&prog);
        return kn_error(KN_ERR_OOM, "kn_cuda_nvrtc_compile: out of memory for %zu bytes of PTX", n);
    }
    if (cubin) nvrtcGetCUBIN(prog, p);
    else nvrtcGetPTX(prog, p);
    p[n] = 0;
    nvrtcDestroyProgram(&prog);
    *ptx = p;
    *ptx_len = n;
    return KN_OK;
}
