# core/carry.mk — test binaries on a machine without Criterion (the lent GPU machine).
#
# There, `bash core/mk/carry-criterion.sh` run here beforehand has put Criterion's headers
# in $(CARRY_DIR)/include and its libraries in $(CARRY_DIR)/lib (.carry, ignored by git,
# travels with the tree). When the compiler finds no <criterion/criterion.h> of its own
# and the carried one is there, test objects compile with -I$(CARRY_DIR)/include and test
# binaries link the carried libcriterion with an RPATH to $(CARRY_DIR)/lib, which also
# finds its dependencies at run time (DT_RPATH, not RUNPATH: RUNPATH would not be used for
# libcriterion's own dependencies). CRITERION_FROM=carry forces the carried copy (to
# check here that a build needs nothing else), CRITERION_FROM=system the system's.

CARRY_DIR ?= .carry
ifeq ($(origin CRITERION_FROM),undefined)
  CRITERION_FROM := $(if $(wildcard $(CARRY_DIR)/include/criterion/criterion.h),$(shell \
    echo '#include <criterion/criterion.h>' | $(CC) -E -x c - > /dev/null 2>&1 && echo system || echo carry),system)
endif
ifeq ($(CRITERION_FROM),carry)
  CARRY_LIB := $(abspath $(CARRY_DIR)/lib)
  TEST_LDLIBS := -L$(CARRY_LIB) -Wl,--disable-new-dtags,-rpath,$(CARRY_LIB) -l:libcriterion.so.3
  $(BUILD)/obj/tests/%.o: CPPFLAGS += -I$(CARRY_DIR)/include
  $(BUILD)/obj/labs/%.o: CPPFLAGS += -I$(CARRY_DIR)/include
else ifneq ($(CRITERION_FROM),system)
  $(error CRITERION_FROM=$(CRITERION_FROM): use system or carry)
endif
