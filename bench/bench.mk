# bench/bench.mk — benchmark drivers (not tests; nothing here runs in make test).
#   make bench-gemm    kiln's CPU GEMM against Debian's OpenBLAS sgemm (opened with dlopen
#                      when installed; skipped with one line when not) at 1024^3 and the GPT
#                      step's shapes (forward and backward), on 1 and 2 threads, interleaved,
#                      medians and bests; --old adds kiln's matmul before cache blocking
#                      (commit GEMM_OLD, its kernels_train.c compiled with every symbol
#                      renamed old_*). BENCH_GEMM_ARGS='--threads 1,2,4 --reps 15 --shapes
#                      mlp-up,logits --old' passes options (bench/gemm_bench.c).
.PHONY: bench-gemm
BENCH_GEMM_ARGS ?=
GEMM_OLD ?= 91c50aa
BENCH_OLD := $(BUILD)/bench/old
$(BENCH_OLD)/kernels_train_old.o: $(LIB)
	@mkdir -p $(@D)
	$(Q)git show $(GEMM_OLD):core/tensor/kernels_train.c > $(@D)/kernels_train.c
	$(Q)git show $(GEMM_OLD):core/tensor/kernels_train.inc > $(@D)/kernels_train.inc
	$(call quiet,CC,$@)$(CC) $(CPPFLAGS) $(CFLAGS) -c $(@D)/kernels_train.c -o $(@D)/raw.o
	$(Q)nm --defined-only -g $(@D)/raw.o | awk '{print $$3" old_"$$3}' > $(@D)/rename.txt
	$(Q)objcopy --redefine-syms=$(@D)/rename.txt $(@D)/raw.o $@
# The old matmul only where git has GEMM_OLD (not in the student tree, which is no
# checkout): without it, --old says so and the rest runs.
BENCH_HAVE_OLD := $(shell git rev-parse -q --verify '$(GEMM_OLD)^{commit}' >/dev/null 2>&1 && echo 1)
$(CFG)/bench-gemm: $(call obj,bench/gemm_bench.c) $(if $(BENCH_HAVE_OLD),$(BENCH_OLD)/kernels_train_old.o) $(LIB)
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
bench-gemm: $(CFG)/bench-gemm
	$(CFG)/bench-gemm $(BENCH_GEMM_ARGS)

#   make bench-int8    the INT8 GEMM (kn_gemm_i8, packed ISA-dispatched microkernels) against
#                      kiln's f32 GEMM at GPT-2 small's shapes ([8192, 768] x [768, 3072] and
#                      others), interleaved, medians, bests and ratios; with
#                      BENCH_INT8_ARGS='--device cuda' the cuBLASLt int8 GEMM against cuBLAS
#                      bf16 instead (bench/int8_bench.c lists the options).
.PHONY: bench-int8
BENCH_INT8_ARGS ?=
$(CFG)/bench-int8: $(call obj,bench/int8_bench.c) $(LIB)
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
bench-int8: $(CFG)/bench-int8
	$(CFG)/bench-int8 $(BENCH_INT8_ARGS)
