# plots/scaling.mk — `make scaling` (issue 34): every parallel strategy's scaling in one place.
#
#   make scaling [SCALING_OUT=DIR] [SCALING_QUICK=1]
#       plots/scaling.sh: DDP, ZeRO-1/2, tp=2 and pp=2 measured now on 1 and 2 CPU ranks, and
#       the GPU runs kept under plots/results/ (make dist-gpu's summaries, the tp and pipeline
#       logs) quoted with their folder, card and date, as DIR/scaling.md with gnuplot figures
#       (tokens/s and efficiency against GPUs, memory per GPU per strategy, collectives
#       against NCCL). DIR defaults to build/scaling. About a minute on 2 cores.
#
# Test step (make test): "scaling", tests/core/test_scaling.sh: the quick driver end to end, and
# plots/scaling.py on a planted results folder (its rows and efficiency exactly) and on none.

SCALING_OUT ?= $(BUILD)/scaling

.PHONY: scaling test-step-scaling
scaling: $(KILN)
	KILN=$(KILN) MPIEXEC='$(MPIEXEC)' SCALING_QUICK=$(SCALING_QUICK) bash plots/scaling.sh $(SCALING_OUT)

TEST_STEPS += test-step-scaling
test-step-scaling:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) scaling env $(DIST_ENV) MPIEXEC='$(MPIEXEC)' bash tests/core/test_scaling.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
