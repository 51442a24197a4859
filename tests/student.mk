# tests/student.mk — make test checks the student tree (issue 19): `make dist-student`'s
# tree is written from the index, then for every lab, in that tree: the untouched skeleton
# builds with the staff's compiled units of the other labs and fails cleanly; the
# reference units copied in pass the public tests; and both give, test by test, the same
# results as in the repository (tests/grader/dist-student.sh check). Then, in the same tree
# (tests/student-tree/, not shipped either): `make run LAB=NN` and `make run-dist` on every
# untouched skeleton stop with "not implemented (labNN" (run-skeletons.sh), and every shell
# command quoted in the handouts, the lessons and README.md (not its section for
# instructors) resolves or runs there (handout-commands.py; in the plain run only: under
# SAN=1 the tree's ./kiln finds no plain build). Not shipped.

TEST_STEPS += test-step-student-tree
.PHONY: test-step-student-tree
test-step-student-tree:
	@rm -rf $(BUILD_ROOT)/student-tree && mkdir -p $(BUILD_ROOT)/student-tree
	@bash tests/grader/dist-student.sh make $(BUILD_ROOT)/student-tree/kiln > $(BUILD_ROOT)/student-tree/make.log 2>&1 || \
	  { cat $(BUILD_ROOT)/student-tree/make.log; echo "0 1 0 0" > $(ALL_RESULTS)/student-dist.count; \
	    echo "student-dist: make dist-student failed: 0 passed, 1 failed"; exit 1; }
	@BUILD_ROOT=$(BUILD_ROOT) bash tests/grader/dist-student.sh check $(BUILD_ROOT)/student-tree/kiln $(abspath $(ALL_RESULTS)); \
	 rc=$$?; \
	 bash tests/student-tree/run-skeletons.sh $(BUILD_ROOT)/student-tree/kiln $(abspath $(ALL_RESULTS)) || rc=1; \
	 if [ "$(SAN)" = 1 ]; then \
	   echo "student-commands: not under SAN=1 (the tree's ./kiln finds the plain build only); the plain make test checks them"; \
	 else \
	   $(PYTHON) tests/student-tree/handout-commands.py $(BUILD_ROOT)/student-tree/kiln $(abspath $(ALL_RESULTS)) || rc=1; \
	 fi; \
	 exit $$rc
