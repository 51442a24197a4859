/* emu_dialect.h: the checks' part of the CUDA emulator dialect, as codegen emits and compiles
 * it: the prelude text the CUDA renderer (render_cuda.c) puts in every emulated kernel, and
 * the compiler flags the C compiler driver (cc.c) compiles that text with.
 *
 * Why here: the renderer and the compiler driver are codegen, below the emulator that runs
 * the result (core/runtime/cuda_emu.h, which includes this header and documents the checks:
 * out-of-bounds accesses through KN_EMU_AT, shared-memory races through gcc's
 * -fsanitize=kernel-address hooks, which core/runtime/cuda_emu_check.c defines). The text
 * only declares the emulator's entry points (kn_emu_oob, kn_emu_shared_window): codegen
 * names them in the source it writes and never links to them. */
#ifndef KN_EMU_DIALECT_H
#define KN_EMU_DIALECT_H

/* The flags that compile code with the emulator's access hooks (-g: the reports' lines).
 * core/emu.mk's EMU_HOOKS is the same list for the hand-written emulated kernels. */
#define KN_EMU_HOOK_FLAGS "-g", "-fsanitize=kernel-address", "--param", "asan-instrumentation-with-call-threshold=0", \
        "--param", "asan-stack=0", "--param", "asan-globals=0"
/* The checks' part of the emulator dialect's prelude (core/codegen/render_cuda.c): the marker
 * cc.c compiles with the hooks on, __shared__ arrays in the shared section, which a
 * constructor announces, and KN_EMU_AT. */
#define KN_EMU_CHECKS_SOURCE                                                                                  \
    "#define KN_EMU_INSTRUMENT 1\n"                                                                           \
    "#define __shared__ static __attribute__((section(\"kn_emu_shared\"), aligned(16)))\n"                     \
    "void *kn_emu_oob(long long i, long long lo, long long hi, int buf, int write, const char *file, const char *fn, "     \
    "int line);\n"                                                                                            \
    "#define KN_EMU_AT(p, i, lo, hi, b, w) ((long long)(i) >= (lo) && (long long)(i) < (hi) ? &(p)[i] : "     \
    "(__typeof__(&(p)[0]))kn_emu_oob((long long)(i), (lo), (hi), (b), (w), __FILE__, __func__, __LINE__))\n"           \
    "void kn_emu_shared_window(const void *lo, const void *hi, int add);\n"                                   \
    "extern char __start_kn_emu_shared[] __attribute__((weak, visibility(\"hidden\")));\n"                    \
    "extern char __stop_kn_emu_shared[] __attribute__((weak, visibility(\"hidden\")));\n"                     \
    "__attribute__((constructor)) static void kn_emu_shared_on(void)\n"                                       \
    "{ if (__start_kn_emu_shared) kn_emu_shared_window(__start_kn_emu_shared, __stop_kn_emu_shared, 1); }\n"   \
    "__attribute__((destructor)) static void kn_emu_shared_off(void)\n"                                       \
    "{ if (__start_kn_emu_shared) kn_emu_shared_window(__start_kn_emu_shared, __stop_kn_emu_shared, 0); }\n"

#endif
