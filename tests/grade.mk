# tests/grade.mk — the instructor pipeline (issue 5); the scripts live in tests/grader/.
#
#   make grade LAB=NN SUBMISSION=path [GRADE_OUT=dir]
#                        grade one submission (folder, .tar.gz or .zip of lab NN's units):
#                        results.json (Gradescope), junit.xml, summary.txt in GRADE_OUT
#                        (default $(BUILD_ROOT)/grade/<submission name>)
#   make grade-all LAB=NN SUBMISSIONS=dir [-jN]
#                        grade every folder/archive in dir; gradebook CSV in GRADE_ALL_OUT
#                        (default $(BUILD_ROOT)/grade-all/labNN/gradebook.csv)
#   make rubric-check LAB=NN  every rubric entry names an existing test, every test has an
#                        entry (0 points: unscored on purpose), the points add up
#   make autograder LAB=NN    $(BUILD_ROOT)/autograder-labNN.zip for Gradescope, with the
#                        KN_GRADE_* settings given here baked in (and KN_GRADE_SKIP_WEIGHT=scale
#                        for a lab with GPU tests unless given)
#   make dist-student         $(BUILD_ROOT)/dist-student/ and .tar.gz: the student tree
#   make test                 runs the steps "grader" (tests/grader/selftest.sh) and
#                             "rubric-check" (every lab's rubric)
# Limits and visibility are environment knobs: tests/grader/README.md. KN_GRADE_RELEASE=1
# (after the deadline) makes the unit-level lines count hidden tests too.

GRADE_BASE = $(BUILD_ROOT)/grade-base/lab$(LAB)
GRADE_OUT ?=

.PHONY: grade grade-all grade-print-flags grade-print-ldflags grade-check-lab autograder dist-student test-step-grader \
	rubric-check test-step-rubric-check
grade-check-lab:
	@test -n "$(LAB)" || { echo "set LAB=NN (labs: $(LAB_IDS))"; exit 2; }

grade: grade-check-lab
	@test -n "$(SUBMISSION)" || { echo "set SUBMISSION=path (a folder, .tar.gz or .zip)"; exit 2; }
	@KN_GRADE_BASE=$(GRADE_BASE) bash tests/grader/grade.sh $(LAB) "$(SUBMISSION)" \
	  "$(or $(GRADE_OUT),$(BUILD_ROOT)/grade/$$(bash tests/grader/grade-all.sh name "$(SUBMISSION)"))"

# The link flags of the test binaries (base.sh adds full RELRO to them).
grade-print-ldflags:
	@echo 'LDFLAGS=$(LDFLAGS)'

# The compiler and flags lab units are built with (read by tests/grader/base.sh).
grade-print-flags:
	@echo 'CC=$(CC)'
	@echo 'CPPFLAGS=$(CPPFLAGS) -Itests/harness'
	@echo 'CFLAGS=$(CFLAGS)'

GRADE_ALL_OUT ?= $(BUILD_ROOT)/grade-all/lab$(LAB)
grade-all: grade-check-lab
	@test -d "$(SUBMISSIONS)" || { echo "set SUBMISSIONS=dir (a folder of submissions)"; exit 2; }
	@bash tests/grader/base.sh $(LAB) $(GRADE_BASE)
	@bash tests/grader/grade-all.sh plan $(LAB) "$(SUBMISSIONS)" $(GRADE_ALL_OUT)
	@KN_GRADE_BASE=$(abspath $(GRADE_BASE)) $(MAKE) --no-print-directory -f $(GRADE_ALL_OUT)/jobs.mk all
	@bash tests/grader/grade-all.sh book $(GRADE_ALL_OUT)

rubric-check: grade-check-lab
	@python3 tests/grader/rubric.py check $(LAB)

autograder: grade-check-lab
	@bash tests/grader/autograder.sh $(LAB) $(BUILD_ROOT)/autograder-lab$(LAB).zip

DIST_STUDENT := $(BUILD_ROOT)/dist-student
dist-student:
	@bash tests/grader/dist-student.sh make $(DIST_STUDENT)

# make test: the grader's self-test (planted submissions of lab 01, formats, batch mode,
# the autograder, the student tree). Needs lab 01's solutions and hidden tests.
ifneq ($(wildcard tests/grader/selftest.sh),)
ifneq ($(wildcard solutions/lab01-*/*.c),)
TEST_STEPS += test-step-grader
endif
endif
# make test: every lab's rubric (a lab without one is not graded, so it is not checked).
RUBRIC_LABS := $(foreach L,$(LAB_IDS),$(if $(wildcard tests/lab$(L)/rubric.txt),$(L)))
ifneq ($(RUBRIC_LABS),)
TEST_STEPS += test-step-rubric-check
endif
test-step-rubric-check:
	@$(foreach L,$(RUBRIC_LABS),bash tests/harness/record.sh $(abspath $(ALL_RESULTS)) rubric-check-lab$(L) \
	  python3 tests/grader/rubric.py check $(L);)

test-step-grader:
	@bash tests/grader/selftest.sh $(BUILD_ROOT) $(abspath $(ALL_RESULTS))

# make test: the grader against hostile submissions (tests/grader/hostile-lab.sh): lab 10,
# whose tests run as MPI ranks, and lab 07; each lab's tests are judged by the checker
# outside the student's process (rubric tag checked).
HOSTILE_LABS := $(foreach L,07 10,$(if $(wildcard solutions/lab$(L)-*/*.c),$(if $(wildcard tests/grader/planted/lab$(L)/plant.py),$(L))))
ifeq ($(filter 10,$(MPI_LAB_IDS)),)
HOSTILE_LABS := $(filter-out 10,$(HOSTILE_LABS))
endif
TEST_STEPS += $(foreach L,$(HOSTILE_LABS),test-step-grader-hostile-lab$(L))
# every attack in both isolation modes (make test repeats only forge_record without bubblewrap)
.PHONY: test-grader-hostile-full
test-grader-hostile-full:
	@for L in $(HOSTILE_LABS); do KN_HOSTILE_NOJAIL=all bash tests/grader/hostile-lab.sh $$L $(BUILD_ROOT) || exit 1; done
.PHONY: $(foreach L,$(HOSTILE_LABS),test-step-grader-hostile-lab$(L))
$(foreach L,$(HOSTILE_LABS),$(eval test-step-grader-hostile-lab$(L): ; @bash tests/harness/record.sh $$(abspath $$(ALL_RESULTS)) grader-hostile-lab$(L) bash tests/grader/hostile-lab.sh $(L) $$(BUILD_ROOT)))
