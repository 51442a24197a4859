# kiln — the one entry point.
#
#   make run                 train the small GPT on the bundled corpus (CPU; GPU when present)
#   make run LAB=NN          the same with YOUR lab NN units, beside the staff's held-out loss
#   make test                every suite: core, every lab's solution (public + hidden), every
#                            lab's skeleton failing cleanly, generated files up to date.
#                            Ends with one line "N passed, N failed".
#   make labNN               build the framework with lab NN's units from labs/ (yours)
#   make test-labNN          run lab NN's public tests (HIDDEN=1 adds tests/labNN/)
#   make skeletons           regenerate labs/*/ units from solutions/ (BEGIN/END SOLUTION)
#   make deps                install what kiln needs (apt-get as root) or say what to install
#   make help                the targets for students, instructors and self-learners
#   make SAN=1 test          the same with AddressSanitizer + UndefinedBehaviorSanitizer
#
# Unit selection (tests/README.md, "The lab mechanism"):
#   IMPL=labs|solutions|staff  units of the lab being built (lab targets default to labs/,
#                            everything else to solutions/, else staff/ when it exists)
#   PRIOR=labs|solutions|staff units of every other lab (default: solutions/ when it exists,
#                            else staff/: the compiled reference units of the student tree)
#
# Areas of the tree add their own targets in */*.mk fragments (book/book.mk, ...), and
# register test steps by appending to TEST_STEPS.

SHELL := /bin/bash
comma := ,
.DEFAULT_GOAL := all
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules
# Parallel by default: one job per core (make -jN or -j1 on the command line wins; sub-makes
# share the top make's jobs).
ifeq ($(MAKELEVEL),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

# ------------------------------------------------------------------ toolchain
CC := $(if $(filter default,$(origin CC)),cc,$(CC))
AR ?= ar
NPROC := $(shell nproc 2>/dev/null || echo 2)
SAN ?= 0
BUILD_ROOT ?= build
BUILD := $(BUILD_ROOT)$(if $(filter 1,$(SAN)),/san,)
OPT ?= -O2

CPPFLAGS := -Icore/include -Icore -D_POSIX_C_SOURCE=200809L
# One set of warnings for every C file: core/, the lab units (solutions/ and the skeletons
# in labs/), the tests and the tools. -Wswitch-enum: a switch over an enum (kn_op,
# kn_unary_op, ...) lists every value, so a new enumerator without a case is a compile
# error, never a `default:` that silently computes something else. nvcc's host compiler
# gets the same list (NVCCFLAGS).
WARN := -Wall -Wextra -Wswitch-enum -Werror
CFLAGS := -std=c11 $(WARN) -g $(OPT) -fno-strict-aliasing
LDLIBS := -lm -ldl -lpthread
# Exported symbols: the CUDA emulator's built-ins (core/runtime/cuda_emu.c) are resolved from
# the executable by the generated kernels it dlopens (core/codegen/render_cuda.c).
LDFLAGS += -rdynamic
ifeq ($(SAN),1)
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  CFLAGS += $(SANFLAGS)
  LDFLAGS += $(SANFLAGS)
endif

# Python for kiln's Python steps: the first interpreter that can import numpy
# (core/mk/python.sh: /usr/bin/python3, where `make deps` installs python3-numpy, before the
# PATH's python3). `make PYTHON=...` picks another. Exported, so sub-makes and scripts
# agree; left unexported when none is found yet, so the sub-makes after `make deps` look again.
ifeq ($(origin PYTHON),undefined)
  PYTHON := $(shell bash core/mk/python.sh numpy)
  ifneq ($(PYTHON),)
    export PYTHON
  else
    PYTHON := python3
  endif
endif

# CUDA: built where a GPU build is asked for and nvcc is there, left out cleanly otherwise.
# CUDA=1 asks for it, CUDA=0 leaves it out; the default (auto) asks for it on a machine with
# an NVIDIA GPU (/dev/nvidia0) and in the staff repository (solutions/ present: make test is
# CI's check that every .cu compiles and links), not in a student tree without a GPU, where
# nvcc's ~20 objects would triple the first build for code that cannot run. Exported, so
# the sub-makes and scripts (make test's student tree) build the same way.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA ?= auto
ifeq ($(CUDA),auto)
  override CUDA := $(if $(wildcard /dev/nvidia[0-9]* solutions/lab*),1,0)
endif
ifeq ($(filter 0 1,$(CUDA)),)
  $(error CUDA=$(CUDA): use CUDA=1 (build the GPU backend), CUDA=0 (leave it out) or CUDA=auto)
endif
export CUDA
ifeq ($(CUDA),0)
  override NVCC :=
endif
ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
  NVCCFLAGS := -std=c++17 -O2 -g $(CUDA_ARCH) -Icore/include -Icore -Xcompiler $(subst $(eval) ,$(comma),$(WARN)) -DKN_HAVE_CUDA=1
  CPPFLAGS += -DKN_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
else
  HAVE_CUDA := 0
endif

# ------------------------------------------------------------------ sources
# The lab units' references are core files too (core/mk/units.list), linked as units (below),
# not as the core's own sources.
UNIT_CORE_SRCS := $(shell bash core/mk/units.sh core)
CORE_SRCS := $(filter-out $(UNIT_CORE_SRCS),$(shell find core -name '*.c' -not -path 'core/cli/*' -not -path 'core/fuzz/*' | sort))
CLI_SRCS := $(sort $(wildcard core/cli/*.c))
CUDA_SRCS := $(if $(filter 1,$(HAVE_CUDA)),$(shell find core -name '*.cu' | sort),)
CORE_TEST_SRCS := $(sort $(wildcard tests/core/*.c))
TEST_SUPPORT_SRCS := $(sort $(wildcard tests/harness/*.c))

# Labs: labs/lab01-tensors -> id 01.
LAB_DIRS := $(sort $(wildcard labs/lab[0-9][0-9]-*))
LAB_IDS := $(patsubst labs/lab%,%,$(foreach d,$(LAB_DIRS),$(firstword $(subst -, ,$(d)))))
HAVE_SOLUTIONS := $(if $(wildcard solutions/lab*),1,0)
# staff/labNN-x/*.o: the reference units compiled, no source (the student tree has them,
# written by make dist-student; the repository has solutions/ instead).
HAVE_STAFF := $(if $(wildcard staff/lab*/*.o),1,0)
DEFAULT_IMPL := $(if $(filter 1,$(HAVE_SOLUTIONS)),solutions,$(if $(filter 1,$(HAVE_STAFF)),staff,labs))

ifneq ($(LAB),)
  override LAB := $(patsubst lab%,%,$(LAB))
  ifeq ($(filter $(LAB),$(LAB_IDS)),)
    $(error LAB=$(LAB): no such lab; labs are: $(LAB_IDS))
  endif
  IMPL ?= labs
  PRIOR ?= $(DEFAULT_IMPL)
  CFG := $(BUILD)/lab$(LAB)-$(IMPL)-$(PRIOR)
else
  IMPL ?= $(DEFAULT_IMPL)
  PRIOR ?= $(IMPL)
  CFG := $(BUILD)/$(IMPL)
endif
ifeq ($(filter $(IMPL),labs solutions staff),)
  $(error IMPL=$(IMPL): use IMPL=labs, IMPL=solutions or IMPL=staff)
endif
ifeq ($(filter $(PRIOR),labs solutions staff),)
  $(error PRIOR=$(PRIOR): use PRIOR=labs, PRIOR=solutions or PRIOR=staff)
endif

$(foreach v,IMPL PRIOR,$(if $(and $(filter solutions,$($(v))),$(filter 0,$(HAVE_SOLUTIONS))),\
  $(error $(v)=solutions: this tree has no solutions/ (the student tree has the reference units \
  compiled, in staff/): use $(v)=staff (the default) or $(v)=labs (your own units))))

# A lab's units: sources from labs/ or solutions/, or the compiled staff/ objects.
unit_dir = $(if $(filter $(1),$(LAB)),$(IMPL),$(PRIOR))
# Units named cuda_*.c (lab 08's cuda_flash_fwd.c) are CUDA C in the emulator's subset: cc
# compiles them for the emulator, as every unit, and nvcc, where it is, for the GPU as well
# (unit.gpu.o, linked beside; staff/ has it when make dist-student ran where nvcc is).
unit_files = $(if $(filter staff,$(1)),$(filter-out $(if $(filter 1,$(HAVE_CUDA)),,%.gpu.o),\
  $(wildcard staff/lab$(2)-*/*.o)),$(wildcard $(1)/lab$(2)-*/*.c))
UNIT_SRCS := $(foreach L,$(LAB_IDS),$(call unit_files,$(call unit_dir,$(L)),$(L)))
cuda_units = $(foreach f,$(1),$(if $(filter cuda_%,$(notdir $(f))),$(f)))
UNIT_GPU_SRCS := $(if $(filter 1,$(HAVE_CUDA)),$(call cuda_units,$(filter %.c,$(UNIT_SRCS))))
$(if $(filter 1,$(HAVE_CUDA)),$(foreach o,$(call cuda_units,$(filter-out %.gpu.o,$(filter %.o,$(UNIT_SRCS)))),\
  $(if $(wildcard $(o:.o=.gpu.o)),,$(error $(o:.o=.gpu.o): missing: this tree's staff units were compiled \
  without nvcc, and nvcc is here; build without CUDA (make CUDA=0 ...), or ask for a tree made with nvcc))))
$(foreach L,$(LAB_IDS),$(if $(filter staff,$(call unit_dir,$(L))),$(if $(wildcard staff/lab$(L)-*/*.o),,\
  $(error lab$(L): no staff units in staff/ (make dist-student writes them); use PRIOR=solutions or PRIOR=labs))))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1)))
CORE_OBJS := $(call obj,$(CORE_SRCS) $(CUDA_SRCS))
UNIT_OBJS := $(call obj,$(filter %.c,$(UNIT_SRCS))) $(filter %.o,$(UNIT_SRCS)) \
  $(patsubst %.c,$(BUILD)/obj/%.gpu.o,$(UNIT_GPU_SRCS))
LIB := $(CFG)/libkiln.a
KILN := $(CFG)/kiln

# ------------------------------------------------------------------ compile and link
# `make V=1` shows the full commands.
Q := $(if $(filter 1,$(V)),,@)
quiet = $(if $(filter 1,$(V)),,@printf '  %-6s %s\n' $(1) $(2);)

# The flags every object depends on beyond its sources (CUDA on or off changes the C
# objects too: -DKN_HAVE_CUDA=1): switching rebuilds them instead of mixing the two.
FLAGS_STAMP := $(BUILD)/obj/.flags-cuda$(HAVE_CUDA)
$(FLAGS_STAMP):
	@mkdir -p $(@D) && rm -f $(BUILD)/obj/.flags-cuda* && touch $@

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,NVCC,$<)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.gpu.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,NVCC,$<)$(NVCC) $(NVCCFLAGS) -x cu -MMD -MP -c $< -o $@

# The archive is rebuilt whenever the unit selection changes (the .units stamp).
$(CFG)/.units: FORCE
	@mkdir -p $(@D)
	@echo '$(UNIT_SRCS)' | cmp -s - $@ || echo '$(UNIT_SRCS)' > $@

$(LIB): $(CORE_OBJS) $(UNIT_OBJS) $(CFG)/.units
	@mkdir -p $(@D)
	@rm -f $@
	$(call quiet,AR,$@)$(AR) rcs $@ $(CORE_OBJS) $(UNIT_OBJS)

$(KILN): $(call obj,$(CLI_SRCS)) $(LIB)
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $(call obj,$(CLI_SRCS)) $(LIB) $(LDLIBS)

TEST_LDLIBS := -lcriterion
TEST_SUPPORT_OBJS := $(call obj,$(TEST_SUPPORT_SRCS))
$(BUILD)/obj/tests/%.o: CPPFLAGS += -Itests/harness

# A test binary: $(call test_bin,name,sources)
define test_bin
$(CFG)/test-$(1): $(call obj,$(2)) $(TEST_SUPPORT_OBJS) $(LIB)
	$$(call quiet,LINK,$$@)$$(CC) $$(LDFLAGS) -o $$@ $(call obj,$(2)) $(TEST_SUPPORT_OBJS) $(LIB) $$(TEST_LDLIBS) $$(LDLIBS)
endef
$(eval $(call test_bin,core,$(CORE_TEST_SRCS)))
# Labs whose tests run as MPI ranks under mpiexec, not Criterion: core/dist.mk builds them.
MPI_LAB_IDS := 10
$(foreach L,$(filter-out $(MPI_LAB_IDS),$(LAB_IDS)),$(eval $(call test_bin,lab$(L),$(wildcard labs/lab$(L)-*/tests/*.c))))
$(foreach L,$(filter-out $(MPI_LAB_IDS),$(LAB_IDS)),$(eval $(call test_bin,lab$(L)-hidden,$(wildcard tests/lab$(L)/*.c))))
$(BUILD)/obj/labs/%.o: CPPFLAGS += -Itests/harness

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ------------------------------------------------------------------ user targets
.PHONY: all run deps lib kiln test test-core FORCE skeletons check-skeletons clean

all: $(KILN) $(CFG)/test-core
lib: $(LIB)
kiln: $(KILN)

deps:
	@bash core/mk/deps.sh

# The main job: train the default small GPT on the bundled corpus (GPU when present).
# make run LAB=NN trains with YOUR lab NN units and puts the staff reference's held-out
# loss for the same settings beside yours (core/mk/run-compare.sh).
RUN_ARGS ?= --out $(BUILD)/ckpt.safetensors
REF_KILN := $(BUILD)/$(DEFAULT_IMPL)/kiln
# make run LAB=NN: the options that make the training step go through lab NN's units (the
# default run already does for labs 01-04 and 06), put before RUN_ARGS so that yours win.
# On the untouched skeleton each of them stops with the skeleton's "not implemented (labNN"
# (tests/student-tree/run-skeletons.sh checks it for every lab).
#   01: eager mode (op by op on kiln's tensors: your strided copies, broadcasts, reductions)
#   02, 03, 06: the default run (its backward, its recorded graph, its matrix products)
#   04: your passes first on the step's graph (--passes all), compiled
#   05: the compiled program only (auto would fall back to the interpreter)
#   07: compiled to CUDA and run by the CPU's CUDA emulator; a small model (the emulator
#       runs a thread at a time: ~15 s a step at make run's shape)
#   08: compiled, with the memory plan and selective recomputation
#   09: bf16 autocast with the dynamic loss scaler
#   10: 2 MPI ranks (mpiexec), DDP with your buckets and your ring all-reduce (make run-dist)
LAB_RUN_ARGS_01 := --mode eager
LAB_RUN_ARGS_04 := --passes all --mode compiled
LAB_RUN_ARGS_05 := --mode compiled
LAB_RUN_ARGS_07 := --mode emu --layers 1 --width 32 --heads 2 --context 32 --batch 4 --steps 40 --eval-batches 2 --sample 0
LAB_RUN_ARGS_08 := --mode compiled --remat selective
LAB_RUN_ARGS_09 := --precision bf16 --loss-scale dynamic
#   11: no training: kiln pp-sim with your schedules (GPipe, 1F1B, interleaved on 4 ranks),
#       compared action for action with the staff's (core/mk/run-pp-sim.sh; LAB_RUN_CMD_NN
#       replaces kiln train, and takes the reference kiln when there is one)
LAB_RUN_ARGS_10 = --dist ddp --device cpu --bucket-mb 0.05 --allreduce ring
LAB_RUN_LAUNCH_10 = env $(DIST_ENV) $(MPIEXEC) -n $(DIST_RANKS)
LAB_RUN_CMD_11 = bash core/mk/run-pp-sim.sh $(KILN)
#   12: no training through your units: kiln eval --compare (fp32, bf16, w8, w8a8) of make
#       run's checkpoint (a short run trains one when there is none) with your quantizer and
#       epilogue, compared with the staff's loss for loss (core/mk/run-quant.sh)
LAB_RUN_CMD_12 = bash core/mk/run-quant.sh $(KILN) $(BUILD)
run: $(KILN)
	@bash core/mk/deps.sh
ifneq ($(and $(LAB),$(filter labs,$(IMPL)),$(filter-out labs,$(DEFAULT_IMPL))),)
	@$(MAKE) --no-print-directory $(REF_KILN) LAB= IMPL=$(DEFAULT_IMPL) PRIOR=$(DEFAULT_IMPL) >/dev/null
	@$(if $(LAB_RUN_CMD_$(LAB)),$(LAB_RUN_CMD_$(LAB)) $(REF_KILN),LAUNCH='$(LAB_RUN_LAUNCH_$(LAB))' \
	  bash core/mk/run-compare.sh $(LAB) $(KILN) $(REF_KILN) $(BUILD)/run-reference $(LAB_RUN_ARGS_$(LAB)) $(RUN_ARGS))
else
	$(if $(LAB_RUN_CMD_$(LAB)),$(LAB_RUN_CMD_$(LAB)),$(LAB_RUN_LAUNCH_$(LAB)) $(KILN) train $(if $(LAB),$(LAB_RUN_ARGS_$(LAB))) $(RUN_ARGS))
endif

# lab01 .. lab12: build with that lab's units (IMPL, default labs/) and PRIOR elsewhere.
# Listed one by one (not a lab% pattern, which would also match file paths under labs/).
LAB_TARGETS := $(foreach L,$(LAB_IDS),lab$(L) test-lab$(L))
.PHONY: $(LAB_TARGETS)
$(foreach L,$(LAB_IDS),$(eval lab$(L): ; @$$(MAKE) --no-print-directory build-lab LAB=$(L)))
$(foreach L,$(LAB_IDS),$(eval test-lab$(L): ; @$$(MAKE) --no-print-directory run-lab-tests LAB=$(L)))

# `make lab07` / `make test-lab7` for a lab that does not exist (yet): say which labs do.
LAB_LIST := $(foreach d,$(LAB_DIRS),$(patsubst labs/%,%,$(d)))
NO_SUCH_LAB_GOALS := $(filter-out $(LAB_TARGETS),$(shell printf '%s\n' $(MAKECMDGOALS) | grep -E '^(test-)?lab[0-9]+$$'))
$(foreach g,$(NO_SUCH_LAB_GOALS),$(eval $(g): ; @echo "make $(g): there is no lab $(lastword $(subst lab, ,$(g))); labs are: $(LAB_LIST)" >&2; exit 2))

.PHONY: build-lab run-lab-tests
# build/last-kiln: the kiln the root's ./kiln runs (the handouts' `./kiln compile ...`).
build-lab: $(KILN) $(CFG)/test-lab$(LAB) $(if $(filter 1,$(HIDDEN)),$(CFG)/test-lab$(LAB)-hidden)
	@echo '$(KILN)' > $(BUILD_ROOT)/last-kiln
	@echo "lab$(LAB): built with lab$(LAB) units from $(IMPL)/, other labs from $(PRIOR)/ -> $(CFG) (./kiln runs $(KILN))"

RESULTS ?= $(CFG)/results
run-lab-tests: build-lab
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@bash tests/harness/run-suite.sh lab$(LAB) $(CFG)/test-lab$(LAB) $(RESULTS); \
	 $(if $(filter 1,$(HIDDEN)),bash tests/harness/run-suite.sh lab$(LAB)-hidden $(CFG)/test-lab$(LAB)-hidden $(RESULTS);) \
	 bash tests/harness/summary.sh $(RESULTS)

test-core: $(CFG)/test-core
	@mkdir -p $(RESULTS)
	@bash tests/harness/run-suite.sh core $(CFG)/test-core $(RESULTS)

# Skeletons are generated from the solutions' BEGIN/END SOLUTION regions.
SOLUTION_UNITS := $(sort $(wildcard solutions/lab*/*.c))
skeletons:
	@bash core/mk/skeleton.sh generate
check-skeletons:
	@bash core/mk/skeleton.sh check

# `make help`: the targets a student, an instructor and a self-learner use.
.PHONY: help
help:
	@echo 'kiln: make targets (README.md says more; labs: $(LAB_LIST))'
	@echo 'everyone'
	@echo '  make run                 train the small GPT on the bundled corpus (GPU when present)'
	@echo '  make test                every test suite; ends with "N passed, N failed"'
	@echo '  make deps                install what kiln needs (or print the apt-get line)'
	@echo 'students (NN = 01, 02, ...)'
	@echo '  make labNN               build kiln with YOUR units from labs/labNN-*/'
	@echo '  make test-labNN          run lab NN'"'"'s public tests against your units'
	@echo '  make run LAB=NN          train the GPT with your lab NN units'
	@printf '  %-24s %s\n' 'PRIOR=labs|$(DEFAULT_IMPL)' 'other labs'"'"' units: yours or the reference (default)'
	@echo '  ./kiln ...               the kiln of your last make labNN (the handouts'"'"' commands)'
	@echo 'instructors'
	@echo '  make test-labNN IMPL=solutions HIDDEN=1   the reference against public + hidden tests'
	@echo '  make skeletons           regenerate labs/ from solutions/ (BEGIN/END SOLUTION)'
	@echo '  make mutants LAB=NN      how strong lab NN'"'"'s tests are: mutants of the solution, killed/total'
	@echo '  make grade LAB=NN SUBMISSION=dir          grade one submission'
	@echo '  make grade-all LAB=NN SUBMISSIONS=dir     grade a folder of submissions'
	@echo '  make autograder LAB=NN   the Gradescope autograder zip'
	@echo '  make dist-student        the student repository (no solutions, no hidden tests)'
	@echo 'self-learners'
	@echo '  make book                build/book/index.html: the lessons with live listings'
	@echo '  make gpu-check           on a GPU machine: GPU tests, PyTorch agreement, benchmark'

# ------------------------------------------------------------------ make test
# Each step writes "passed failed abnormal skipped" into $(ALL_RESULTS)/<name>.count
# (run-suite.sh and record.sh do) and may fail; a step that fails without writing any
# (its build broke) is counted as one failure. The summary adds them up and decides the
# exit status.
ALL_RESULTS := $(BUILD)/test-results
TEST_STEPS := test-step-core test-step-resume-cli test-step-skeletons-fresh test-step-lab03-corpus \
  $(foreach L,$(LAB_IDS),test-step-lab$(L)-solution test-step-lab$(L)-skeleton)

test:
	@rm -rf $(ALL_RESULTS) && mkdir -p $(ALL_RESULTS)
	@bash core/mk/deps.sh --check
	@for s in $(TEST_STEPS); do \
	    n=$$(find $(ALL_RESULTS) -name '*.count' | wc -l); \
	    $(MAKE) --no-print-directory $$s && continue; \
	    [ "$$(find $(ALL_RESULTS) -name '*.count' | wc -l)" -gt "$$n" ] && continue; \
	    echo "0 1 1 0" > $(ALL_RESULTS)/$$s.count; \
	    echo "$$s: failed before it could run its tests (build error above?): 0 passed, 1 failed"; \
	done
	@bash tests/harness/summary.sh $(ALL_RESULTS)

.PHONY: $(TEST_STEPS)
test-step-core:
	@$(MAKE) --no-print-directory test-core IMPL=$(DEFAULT_IMPL) RESULTS=$(abspath $(ALL_RESULTS))
test-step-resume-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) resume-cli bash tests/core/test_nn_resume_cli.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
test-step-lab03-corpus:
	@bash tests/harness/record.sh $(ALL_RESULTS) lab03-corpus-fresh $(PYTHON) tests/lab03/check_corpus.py
test-step-skeletons-fresh:
	@bash tests/harness/record.sh $(ALL_RESULTS) skeletons-fresh bash core/mk/skeleton.sh check
$(foreach L,$(LAB_IDS),$(eval test-step-lab$(L)-solution: ; @$$(MAKE) --no-print-directory run-lab-tests LAB=$(L) IMPL=solutions PRIOR=solutions HIDDEN=1 RESULTS=$$(abspath $$(ALL_RESULTS))/lab$(L)-solution))
$(foreach L,$(LAB_IDS),$(eval test-step-lab$(L)-skeleton: ; @$$(MAKE) --no-print-directory build-lab LAB=$(L) IMPL=labs PRIOR=solutions HIDDEN=1 >/dev/null && bash tests/harness/skeleton-check.sh lab$(L) $$(BUILD)/lab$(L)-labs-solutions $$(abspath $$(ALL_RESULTS))))

clean:
	rm -rf $(BUILD_ROOT)

FORCE:

# ------------------------------------------------------------------ area fragments
include $(sort $(wildcard */*.mk))
