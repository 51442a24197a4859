# core/dist.mk — building and testing data-parallel training (core/dist/, kiln/dist.h).
#
#   make run-dist             train `make run`'s model on 2 CPU ranks: mpiexec -n 2 kiln
#                             train --dist ddp (DIST_ARGS adds flags, DIST_RANKS sets N)
#   make test-offload-gpu     ZeRO-Offload (--offload optimizer) on the lent GPUs against the
#                             step on the GPU (tests/dist/test_offload_gpu.sh)
#   make bench-comm           kiln bench-comm on 2 ranks: kiln's ring all-reduce against
#                             the MPI library's MPI_Iallreduce at a few sizes
#   make test                 runs test-step-dist-* (below): the communicator tests on 2 and
#                             4 ranks, the combination matrix (every precision x strategy x
#                             mode x accumulation cell on 2 ranks against one process),
#                             strategy equality against one process, the memory and overlap
#                             figures, the timeout tests, pipeline parallelism
#                             (test-step-dist-pp: every schedule on 1, 2 and 4 ranks) and
#                             the dp x pp and dp x tp meshes (test-step-dist-mesh: 2 and 4
#                             ranks)
#
# MPI-neutral: MPICC and MPIEXEC pick the MPI (MPICH here, Open MPI on the GPU machines);
# the compile and link flags come from `$(MPICC) -show` (MPICH) or `--showme` (Open MPI).
# Without an mpicc, kiln builds without MPI and `--dist` says so. NCCL is built in when
# CUDA, nccl.h and MPI are all there.

MPICC ?= mpicc
MPIEXEC ?= mpiexec
MPI_SHOW := $(strip $(shell $(MPICC) -show 2>/dev/null || $(MPICC) --showme 2>/dev/null))
ifneq ($(MPI_SHOW),)
  HAVE_MPI := 1
  MPI_CPPFLAGS := $(filter -I% -D%,$(MPI_SHOW)) -DKN_HAVE_MPI=1
  MPI_LDLIBS := $(filter -L% -l% -Wl% -pthread,$(MPI_SHOW))
  $(BUILD)/obj/core/dist/%.o: CPPFLAGS += $(MPI_CPPFLAGS)
  $(BUILD)/obj/core/cli/%.o: CPPFLAGS += $(MPI_CPPFLAGS)
  $(BUILD)/obj/tests/dist/%.o: CPPFLAGS += $(MPI_CPPFLAGS)
  $(BUILD)/obj/tests/harness/mpi/%.o: CPPFLAGS += $(MPI_CPPFLAGS)
else
  HAVE_MPI := 0
endif

NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h))
NCCL_LIBDIR := $(dir $(firstword $(wildcard $(CUDA_HOME)/lib/libnccl.so $(CUDA_HOME)/lib64/libnccl.so \
  /usr/local/lib/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so)))
ifeq ($(HAVE_CUDA)$(HAVE_MPI),11)
  ifneq ($(NCCL_H)$(NCCL_LIBDIR),)
    HAVE_NCCL := 1
    $(BUILD)/obj/core/dist/%.o: CPPFLAGS += -DKN_HAVE_NCCL=1 -I$(dir $(NCCL_H))
    $(BUILD)/obj/core/cli/%.o: CPPFLAGS += -DKN_HAVE_NCCL=1
    $(BUILD)/obj/tests/dist/%.o: CPPFLAGS += -DKN_HAVE_NCCL=1
    MPI_LDLIBS += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl
  endif
endif

# Only the programs that talk to other ranks link MPI (and NCCL): kiln and test-dist. The
# test binaries do not (nothing they call reaches core/dist/), so MPI's libraries (UCX
# installs signal handlers when it loads) stay out of the Criterion suites and the grader.
$(KILN): LDLIBS += $(MPI_LDLIBS)

# The multi-rank test program: plain C (not Criterion: Criterion forks, MPI ranks must not).
DIST_TEST := $(CFG)/test-dist
DIST_TEST_OBJS := $(call obj,tests/dist/test_comm.c tests/dist/test_dp.c tests/dist/test_matrix.c tests/dist/test_tp.c tests/dist/test_pp.c)
$(DIST_TEST): $(DIST_TEST_OBJS) $(LIB)
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $(DIST_TEST_OBJS) $(LIB) $(LDLIBS) $(MPI_LDLIBS)

# MPICH: ranks yield their core while they wait inside MPI itself (MPI_Init, MPI_Finalize);
# kiln's own waits poll and sleep (comm.c).
DIST_ENV := MPIR_CVAR_CH4_OFI_ENABLE_PROGRESS_THREAD=0 MPIR_CVAR_POLLS_BEFORE_YIELD=1 KILN_COMM_TIMEOUT=60
DIST_RANKS ?= 2
DIST_ARGS ?=

.PHONY: run-dist bench-comm
# In the student tree (staff/ units, no solutions/), make run-dist is lab 10's: YOUR buckets
# and ring all-reduce (--allreduce ring), the other labs the staff's. LAB=10 does the same
# anywhere; RUN_ARGS and DIST_ARGS come last, so they override.
ifeq ($(DEFAULT_IMPL)$(LAB),staff)
run-dist:
	@$(MAKE) --no-print-directory run-dist LAB=10
else
run-dist: $(KILN)
	$(DIST_ENV) $(MPIEXEC) -n $(DIST_RANKS) $(KILN) train --dist ddp --device cpu --bucket-mb 0.05 \
	  $(if $(filter 10,$(LAB)),--allreduce ring) $(RUN_ARGS) $(DIST_ARGS)
endif

bench-comm: $(KILN)
	$(DIST_ENV) $(MPIEXEC) -n $(DIST_RANKS) $(KILN) bench-comm

TEST_STEPS += test-step-dist-comm test-step-dist-matrix test-step-dist-train test-step-dist-timeout test-step-dist-tp test-step-dist-pp test-step-dist-mesh test-step-offload-cli test-step-optim-ptx
.PHONY: test-step-dist-comm test-step-dist-matrix test-step-dist-train test-step-dist-timeout test-step-dist-tp test-step-dist-pp test-step-dist-mesh test-step-offload-cli test-step-optim-ptx
# ZeRO-Offload without a GPU (tests/dist/test_offload_cli.sh): the refusals and argument errors
# (all before MPI starts), and its wiring on the CPU (KILN_OFFLOAD_ON_CPU=1) against the run
# without it, byte for byte: one process, ddp, zero1, zero2 on 2 ranks, resume. Its host step:
# tests/core/test_offload.c.
test-step-offload-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) offload-cli env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_offload_cli.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
# The host's optimizer loop is ZeRO-Offload's update (124M parameters a step, every core):
# vectorized at -O3, sqrt inline (no errno call to keep it scalar), never a fused multiply-add
# (the bits are the scalar loop's and the GPU kernel's: tests/core/test_offload.c, optim-ptx).
$(BUILD)/obj/core/runtime/optim.o: CFLAGS += -O3 -fno-math-errno -ffp-contract=off
# The GPU's optimizer kernels round like the host's (tests/dist/test_optim_ptx.sh, where nvcc
# is): no fused multiply-add in their PTX, so the offloaded update (on the host) is the GPU's
# byte for byte and tests/dist/test_offload_gpu.sh can demand equality.
test-step-optim-ptx:
	@bash tests/harness/record.sh $(ALL_RESULTS) optim-ptx bash tests/dist/test_optim_ptx.sh '$(NVCC)'
# ZeRO-Offload on GPUs (by hand on the lent machine; "skip" without a GPU): one GPU offloaded
# against not (losses, parameters, the peak lower by the optimizer state), --dist ddp, zero1,
# zero2 on 2 GPUs over NCCL the same way, and GPT-2 124M's tokens/s with and without
# (tests/dist/test_offload_gpu.sh)
.PHONY: test-offload-gpu
test-offload-gpu: $(KILN)
	MPIEXEC='$(MPIEXEC)' bash tests/dist/test_offload_gpu.sh $(KILN) $(BUILD)/offload-gpu-test
# tensor parallelism (tests/dist/test_tp.c): the placement pass's local graphs on 2 and 4
# ranks (tp=2, tp=4) against one process, and the bad meshes of kiln train --mesh
test-step-dist-tp:
	@$(MAKE) --no-print-directory $(KILN) $(CFG)/test-dist IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-tp env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_tp.sh $(BUILD)/$(DEFAULT_IMPL)/test-dist $(BUILD)/$(DEFAULT_IMPL)/kiln
# the 8-rank meshes of issue 33 (tp=8, dp=2,tp=4, dp=4,tp=2, pp=8 with each schedule,
# dp=2,tp=2,pp=2 with each schedule)
# against one process; not in make test (8 ranks on 2 cores take minutes)
.PHONY: test-dist-full
test-dist-full: $(KILN)
	$(DIST_ENV) MPIEXEC='$(MPIEXEC)' bash tests/dist/test_dist_full.sh $(KILN)
# tensor parallelism on 2 GPUs (NCCL) against one GPU; skips without 2 GPUs (run it on the
# lent machine: make test-tp-gpu)
.PHONY: test-tp-gpu
test-tp-gpu: $(KILN)
	MPIEXEC='$(MPIEXEC)' bash tests/dist/test_tp_gpu.sh $(KILN)
test-step-dist-comm:
	@$(MAKE) --no-print-directory $(CFG)/test-dist IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-comm env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_comm.sh $(BUILD)/$(DEFAULT_IMPL)/test-dist
# the combination matrix (tests/dist/test_matrix.c tests/dist/test_tp.c): every precision x strategy x mode x
# accumulation cell on 2 ranks against one process, in one launch
test-step-dist-matrix:
	@$(MAKE) --no-print-directory $(CFG)/test-dist IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-matrix env $(DIST_ENV) \
	  timeout 600 $(MPIEXEC) -n 2 $(BUILD)/$(DEFAULT_IMPL)/test-dist matrix
test-step-dist-train:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-train env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_train.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
# pipeline parallelism (tests/dist/test_pp.sh): every schedule on 1, 2 and 4 ranks against one
# process (test-dist pp and kiln train --pp), the timeline's structure, the refusals
test-step-dist-pp:
	@$(MAKE) --no-print-directory $(KILN) $(CFG)/test-dist IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-pp env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_pp.sh $(BUILD)/$(DEFAULT_IMPL)/kiln $(BUILD)/$(DEFAULT_IMPL)/test-dist
# meshes composing the axes (tests/dist/test_mesh.sh): kiln train --mesh dp=2,pp=2 on 4 ranks
# against one process (fp32 AdamW and SGD, each schedule, bf16, fp16, resume), fp16 with an
# overflow on one rank and --resume on tp=2 and dp=2,tp=2, the memory per rank, the refusals
# of what is not built
test-step-dist-mesh:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-mesh env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_mesh.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
# GPU ranks (by hand on a machine with 2 or 4 GPUs; "skip" without): equality with one GPU
# and the bubble of pp=4, m=16 (tests/dist/test_pp_gpu.sh)
.PHONY: test-dist-pp-gpu
test-dist-pp-gpu: $(KILN)
	MPIEXEC='$(MPIEXEC)' bash tests/dist/test_pp_gpu.sh $(KILN) $(BUILD)/pp-gpu
# data parallelism on GPU ranks (by hand on a machine with 2 or more GPUs; "skip" without):
# ZeRO-3 and --accum 2 under every strategy, fp32 and bf16, against one GPU, and ZeRO-3's
# memory per GPU against DDP's (tests/dist/test_dist_gpu.sh)
.PHONY: test-dist-gpu
test-dist-gpu: $(KILN)
	MPIEXEC='$(MPIEXEC)' bash tests/dist/test_dist_gpu.sh $(KILN) $(BUILD)/dist-gpu-test
test-step-dist-timeout:
	@$(MAKE) --no-print-directory $(KILN) $(CFG)/test-dist IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) dist-timeout env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' \
	  bash tests/dist/test_timeout.sh $(BUILD)/$(DEFAULT_IMPL)/kiln $(BUILD)/$(DEFAULT_IMPL)/test-dist

# Lab tests that run as MPI ranks (MPI_LAB_IDS in the Makefile: lab 10): plain C programs
# around tests/harness/mpi/kn_mpi_test.c, which starts itself under mpiexec -n 2 and -n 4
# and writes the TAP file tests/harness/run-suite.sh reads, like a Criterion binary. So
# make test-lab10, the test-step-lab10-* steps and skeleton-check.sh work unchanged.
MPI_TEST_OBJS := $(call obj,tests/harness/mpi/kn_mpi_test.c)
define mpi_test_bin
$(CFG)/test-$(1): $(call obj,$(2)) $(MPI_TEST_OBJS) $(LIB)
	$$(call quiet,LINK,$$@)$$(CC) $$(LDFLAGS) -o $$@ $(call obj,$(2)) $(MPI_TEST_OBJS) $(LIB) $$(LDLIBS) $$(MPI_LDLIBS)
endef
$(foreach L,$(MPI_LAB_IDS),$(eval $(call mpi_test_bin,lab$(L),$(wildcard labs/lab$(L)-*/tests/*.c))))
$(foreach L,$(MPI_LAB_IDS),$(eval $(call mpi_test_bin,lab$(L)-hidden,$(wildcard tests/lab$(L)/*.c))))

# The lesson 10 figure: a real `make run-dist` run with KILN_DP_TIMELINE, drawn by gnuplot
# (plots/dp_overlap.sh) into book/figures/dp-overlap.svg, which is committed.
.PHONY: plot-dp-overlap
plot-dp-overlap: $(KILN)
	KILN_DP_TIMELINE=$(abspath $(BUILD))/dp-timeline.txt $(MAKE) --no-print-directory run-dist DIST_ARGS="--steps 20 --out none --sample 0 $(DIST_ARGS)"
	bash plots/dp_overlap.sh $(BUILD)/dp-timeline.txt book/figures/dp-overlap.svg

# The multi-GPU run (plots/dist-gpu.sh): DDP over NCCL on every GPU of the machine against
# one GPU (equality), the GPT-2 124M-shape scaling, kiln's collectives against NCCL's own
# through PyTorch, PyTorch DDP (DIST_GPU_REF: the folder of torch_ddp.py), and faults.
DIST_GPU_LOGS ?= build/dist-gpu
DIST_GPU_REF ?=
.PHONY: dist-gpu
dist-gpu: $(KILN)
	KILN=$(KILN) MPIEXEC='$(MPIEXEC)' bash plots/dist-gpu.sh $(DIST_GPU_LOGS) $(DIST_GPU_REF)
