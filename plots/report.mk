# plots/report.mk — the capstone's evaluation drivers (issue 34). Included by the top Makefile.
#
#   make ablation [DEVICE=cpu|cuda] [ABLATION_OUT=DIR] [ABLATION_FLAGS="kiln bench size flags"]
#       kiln's training step with every optimization on, then each switched off alone
#       (plots/ablation.sh): DIR/ablation.md (the table, machine and date), .tsv, .svg, .png.
#       DEVICE defaults to cuda when nvidia-smi sees a GPU, else cpu; DIR to build/ablation-DEVICE.
#
#   make report [REPORT_OUT=DIR] [REPORT_QUICK=1]
#       the capstone report (plots/report.sh, then plots/report.py): train, latency, memory,
#       correctness, roofline, ablation, scaling, inference and quantization measured in this
#       run on the CPU, the GPU runs under plots/results/ quoted with their folder and date:
#       DIR/report.html (pandoc, the book's stylesheet), report.md, the figures, logs/. DIR
#       defaults to build/report. About 3 minutes on 2 cores; REPORT_QUICK=1 shrinks every step.
#
#   make report LAB=12 [REPORT_QUICK=1]
#       lab 12's report, in the same DIR: kiln built with YOUR lab 12 units (labs/, the
#       other labs from PRIOR), a model trained, its quantized held-out losses beside the
#       reference units' (which must agree to the digit), and your quantizer and epilogue
#       measured on its weights (plots/quant_units.c linked with your build's libkiln.a).
#       About 20 seconds; an unwritten unit stops it with the skeleton's message.
#
# Test steps (make test): "report", tests/core/test_report.sh (the quick report, every
# section and figure there, a missing measurement refused by name); "ablation", tests/core/test_ablation.sh: the driver on a tiny GPT,
# checking its rows, that no optimization changes the loss beyond rounding, that the memory
# plan saves memory, and that the figure is drawn.

ABLATION_DEVICE := $(or $(DEVICE),$(if $(shell nvidia-smi -L 2>/dev/null | grep -m1 GPU),cuda,cpu))
ABLATION_OUT ?= $(BUILD)/ablation-$(ABLATION_DEVICE)
ABLATION_FLAGS ?=

REPORT_OUT ?= $(BUILD)/report

.PHONY: ablation test-step-ablation report test-step-report
report: $(KILN)
ifeq ($(LAB),12)
	@$(MAKE) --no-print-directory $(REF_KILN) LAB= IMPL=$(DEFAULT_IMPL) PRIOR=$(DEFAULT_IMPL) >/dev/null
	KILN=$(KILN) REF_KILN=$(REF_KILN) LIBKILN=$(LIB) REPORT_LAB=12 REPORT_QUICK=$(REPORT_QUICK) CC='$(CC)' \
	  QCFLAGS='$(CPPFLAGS) $(CFLAGS)' QLDLIBS='$(LDFLAGS) $(LDLIBS)' bash plots/report.sh $(REPORT_OUT)
else
	KILN=$(KILN) MPIEXEC='$(MPIEXEC)' REPORT_QUICK=$(REPORT_QUICK) bash plots/report.sh $(REPORT_OUT)
endif

ablation: $(KILN)
	KILN=$(KILN) bash plots/ablation.sh $(ABLATION_OUT) --device $(ABLATION_DEVICE) $(ABLATION_FLAGS)

TEST_STEPS += test-step-ablation
test-step-ablation:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) ablation bash tests/core/test_ablation.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

TEST_STEPS += test-step-report
test-step-report:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) report env MPIEXEC='$(MPIEXEC)' bash tests/core/test_report.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

# make test: "report-lab12", tests/core/test_report_lab12.sh: `make report LAB=12` (quick)
# with the reference units writes the lab report, and with the skeleton stops with its
# message. Only where the solutions are (not in the student tree).
ifeq ($(HAVE_SOLUTIONS),1)
TEST_STEPS += test-step-report-lab12
.PHONY: test-step-report-lab12
test-step-report-lab12:
	@bash tests/harness/record.sh $(ALL_RESULTS) report-lab12 bash tests/core/test_report_lab12.sh
endif
