# core/emu.mk — the CUDA emulator's test step (core/runtime/cuda_emu.h, issue 14).
#
#   make test runs "cuda-emu": tests/emu/test_cuda_emu.c runs kernels on the CPU emulator
#   (a shared-memory block reduction that needs a real barrier; a __syncthreads() in
#   divergent code that must be reported as a deadlock, not hang; a race whose outcome the
#   seeded thread order changes), and "emu-checks": tests/emu/test_emu_checks.c, the
#   emulator's compute-sanitizer checks (races, out-of-bounds accesses, divergent barriers),
#   each reported with kernel, block, thread and line, and none on the correct kernels.
#   No GPU needed.

TEST_STEPS += test-step-cuda-emu
.PHONY: test-step-cuda-emu
EMU_TEST := $(BUILD)/emu/test_cuda_emu
EMU_SRCS := core/runtime/cuda_emu.c core/runtime/cuda_emu_check.c
EMU_HDRS := core/runtime/cuda_emu.h core/runtime/cuda_emu_state.h core/codegen/emu_dialect.h
$(EMU_TEST): tests/emu/test_cuda_emu.c $(EMU_SRCS) $(EMU_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) tests/emu/test_cuda_emu.c $(EMU_SRCS) -ldl -o $@
test-step-cuda-emu: $(EMU_TEST)
	@bash tests/harness/record.sh $(ALL_RESULTS) cuda-emu timeout 60 $(EMU_TEST)

# The emulator's checks (races, out-of-bounds, divergent barriers): the test's kernels are
# compiled with the access hooks, as cc.c compiles the emulator dialect (KN_EMU_HOOK_FLAGS in
# core/codegen/emu_dialect.h, the same list; not under SAN=1, whose ASan owns the hooks'
# names).
EMU_HOOKS := -g -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
  --param asan-stack=0 --param asan-globals=0
EMU_CHECKS := $(BUILD)/emu/test_emu_checks
$(EMU_CHECKS): tests/emu/test_emu_checks.c tests/emu/emu_oob_shared.c $(EMU_SRCS) $(EMU_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c core/runtime/cuda_emu.c -o $@.emu.o
	$(CC) $(CPPFLAGS) $(CFLAGS) -c core/runtime/cuda_emu_check.c -o $@.check.o
	$(CC) $(CPPFLAGS) $(CFLAGS) $(EMU_HOOKS) -rdynamic tests/emu/test_emu_checks.c $@.emu.o $@.check.o tests/emu/emu_oob_shared.c -ldl -o $@
ifneq ($(SAN),1)
TEST_STEPS += test-step-emu-checks
endif
.PHONY: test-step-emu-checks
test-step-emu-checks: $(EMU_CHECKS)
	@bash tests/harness/record.sh $(ALL_RESULTS) emu-checks timeout 120 $(EMU_CHECKS)

# The emulator's hand-written CUDA kernels (flash attention, the embedding gradient: the
# *_emu.c files) and lab 08's flash unit (cuda_flash_fwd.c) are compiled with the access
# hooks too, so their shared memory is race- and bounds-checked as the generated kernels' is.
ifneq ($(SAN),1)
$(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out core/runtime/cuda_emu.c,$(wildcard core/runtime/*_emu.c))): \
  CFLAGS += $(EMU_HOOKS)
$(foreach impl,solutions labs,$(BUILD)/obj/$(impl)/lab08-memory/cuda_flash_fwd.o): CFLAGS += $(EMU_HOOKS)
endif
