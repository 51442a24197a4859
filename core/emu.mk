# core/emu.mk — the CUDA emulator's test step (core/runtime/cuda_emu.h, issue 14).
#
#   make test runs "cuda-emu": tests/emu/test_cuda_emu.c runs kernels on the CPU emulator
#   (a shared-memory block reduction that needs a real barrier; a __syncthreads() in
#   divergent code that must be reported as a deadlock, not hang). No GPU needed.

TEST_STEPS += test-step-cuda-emu
.PHONY: test-step-cuda-emu
EMU_TEST := $(BUILD)/emu/test_cuda_emu
$(EMU_TEST): tests/emu/test_cuda_emu.c core/runtime/cuda_emu.c core/runtime/cuda_emu.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) tests/emu/test_cuda_emu.c core/runtime/cuda_emu.c -o $@
test-step-cuda-emu: $(EMU_TEST)
	@bash tests/harness/record.sh $(ALL_RESULTS) cuda-emu timeout 60 $(EMU_TEST)
