# tests/mutants.mk — how strong are a lab's tests? Mutation testing of its solution.
#
#   make mutants LAB=NN       plant mutants in solutions/labNN-*/*.c (BEGIN/END SOLUTION
#                             regions; kinds in tests/mutants/mutate.py), build and run each
#                             against the public and hidden tests, print killed/total and a
#                             diff of every survivor, record every result in
#                             tests/labNN/mutants.tsv (check it in). Mark a survivor no test
#                             can kill in tests/labNN/mutants-equivalent.txt (KEY<TAB>reason).
#       MUTANTS=survivors     only the mutants recorded as survivors (or new): fast, while
#                             strengthening tests; MUTANTS="KEY ..." only those
#       MUTANT_JOBS=N         mutants at a time (default: all CPUs)
#       MUTANT_TIMEOUT=S      seconds per test binary (default 30); a mutant still running
#                             then is killed, and counts as killed ("timeout")
#
# Test step (make test), for every lab: MUTANT_SAMPLE (5) mutants drawn with MUTANT_SEED
# among those tests/labNN/mutants.tsv records as killed are run again, and the step fails
# when one survives (a test got weaker). A lab with no record yet is skipped, with a line.

MUTANT_JOBS ?= $(NPROC)
MUTANT_TIMEOUT ?= 30
MUTANTS ?= all
MUTANT_SAMPLE ?= 5
MUTANT_SEED ?= kiln

# A lab whose tests run as MPI ranks (MPI_LAB_IDS, core/dist.mk: lab 10) links its test
# programs with kiln's MPI test main and MPI's libraries instead of Criterion's; the
# launcher takes the same --tap, --timeout and KN_TEST_DONE, so a mutant runs the same way.
mutant_support = $(if $(filter $(1),$(MPI_LAB_IDS)),$(MPI_TEST_OBJS),$(TEST_SUPPORT_OBJS))
mutant_test_ldlibs = $(if $(filter $(1),$(MPI_LAB_IDS)),$(MPI_LDLIBS),$(TEST_LDLIBS))

# $(call mutant_args,NN): the build the mutants are made from (solutions everywhere).
mutant_args = --lab $(1) --cc='$(CC)' --cppflags='$(CPPFLAGS)' --cflags='$(CFLAGS)' --ldflags='$(LDFLAGS)' \
  --ldlibs='$(LDLIBS)' --test-ldlibs='$(call mutant_test_ldlibs,$(1))' --lib $(BUILD)/lab$(1)-solutions-solutions/libkiln.a \
  --support-objs='$(call mutant_support,$(1))' --public-objs='$(call obj,$(wildcard labs/lab$(1)-*/tests/*.c))' \
  --hidden-objs='$(call obj,$(wildcard tests/lab$(1)/*.c))' --work $(BUILD)/mutants/lab$(1) \
  --timeout $(MUTANT_TIMEOUT)

# Without the CUDA backend by default (MUTANT_CUDA=0: a build of its own under
# $(BUILD_ROOT)/cpu-only): the lab tests run on the CPU either way, and a test process that
# loads cuBLAS starts about ten times slower, which a thousand mutants feel.
MUTANT_CUDA ?= 0
.PHONY: mutants
ifeq ($(HAVE_CUDA)$(MUTANT_CUDA),10)
mutants:
	@$(MAKE) --no-print-directory mutants NVCC= BUILD_ROOT=$(BUILD_ROOT)/cpu-only
else
mutants:
	@[ -n "$(LAB)" ] || { echo "usage: make mutants LAB=NN (labs: $(LAB_IDS))" >&2; exit 2; }
	@$(MAKE) --no-print-directory build-lab LAB=$(LAB) IMPL=solutions PRIOR=solutions HIDDEN=1 > /dev/null
	@$(PYTHON) tests/mutants/mutants.py run $(call mutant_args,$(LAB)) --jobs $(MUTANT_JOBS) --only $(MUTANTS) --record
endif

MUTANT_STEPS := $(foreach L,$(LAB_IDS),test-step-mutants-lab$(L))
TEST_STEPS += $(MUTANT_STEPS)
.PHONY: $(MUTANT_STEPS)
$(foreach L,$(LAB_IDS),$(eval test-step-mutants-lab$(L): ; \
  @if [ ! -f tests/lab$(L)/mutants.tsv ]; then mkdir -p $$(ALL_RESULTS); echo "0 0 0 1" > $$(ALL_RESULTS)/mutants-lab$(L).count; \
     echo "mutants-lab$(L): skipped (no tests/lab$(L)/mutants.tsv yet: make mutants LAB=$(L) records one)"; \
   else $$(MAKE) --no-print-directory build-lab LAB=$(L) IMPL=solutions PRIOR=solutions HIDDEN=1 > /dev/null && \
     bash tests/harness/record.sh $$(ALL_RESULTS) mutants-lab$(L) $$(PYTHON) tests/mutants/mutants.py sample \
       $$(call mutant_args,$(L)) --n $$(MUTANT_SAMPLE) --seed $$(MUTANT_SEED) --jobs $$(MUTANT_JOBS); fi))
