# core/ir.mk — extra targets of the graph IR: the libFuzzer target for the IR parser.
#
#   make fuzz-ir              build core/fuzz/fuzz_ir_parse.c with clang (libFuzzer + ASan
#                             + UBSan) and fuzz the parser for FUZZ_TIME seconds (30),
#                             seeded with tests/ir/{good,bad}/*.ir; a finding fails it
#   make test                 runs it as the step "fuzz-ir", for FUZZ_TEST_TIME seconds (15,
#                             to keep the suite within its 20 minutes; make fuzz-ir alone
#                             fuzzes for FUZZ_TIME)
#
# The fuzz build compiles libkiln's C sources again with clang into $(BUILD_ROOT)/fuzz
# (no CUDA: the parser needs none of it).

FUZZ_CC ?= clang
FUZZ_TIME ?= 30
FUZZ_TEST_TIME ?= 15
FUZZ_DIR := $(BUILD_ROOT)/fuzz
FUZZ_SRCS := $(CORE_SRCS) $(UNIT_SRCS)
FUZZ_OBJS := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_SRCS))
FUZZ_CPPFLAGS := -Icore/include -Icore -D_POSIX_C_SOURCE=200809L
FUZZ_CFLAGS := -std=c11 $(WARN) -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
  -fno-sanitize-recover=undefined

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz-ir-parse: core/fuzz/fuzz_ir_parse.c $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJS) -o $@ -lm -ldl -lpthread

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)

.PHONY: fuzz-ir test-step-fuzz-ir
fuzz-ir: $(FUZZ_DIR)/fuzz-ir-parse
	@rm -rf $(FUZZ_DIR)/corpus && mkdir -p $(FUZZ_DIR)/corpus
	@cp tests/ir/good/*.ir tests/ir/bad/*.ir $(FUZZ_DIR)/corpus/
	$(FUZZ_DIR)/fuzz-ir-parse -max_total_time=$(FUZZ_TIME) -max_len=4096 -print_final_stats=1 \
	  -dict=core/fuzz/ir.dict -artifact_prefix=$(FUZZ_DIR)/ $(FUZZ_DIR)/corpus

TEST_STEPS += test-step-fuzz-ir
test-step-fuzz-ir:
	@bash tests/harness/record.sh $(ALL_RESULTS) fuzz-ir $(MAKE) --no-print-directory fuzz-ir FUZZ_TIME=$(FUZZ_TEST_TIME)

# The training kernels are the CPU hot path: let the compiler vectorize them (the
# micro-kernel's fixed-size loops unroll into registers at -O3; a*b+c may become one FMA).
$(BUILD)/obj/core/tensor/kernels_train.o: CFLAGS += -O3 -ffp-contract=fast
# Lab 06's f32 units are that hot path too (kn_k_matmul_f32 runs them): the same flags, for
# the staff's units and the students' (without them the x86-64-v3 clone multiplies and adds
# separately instead of fusing, and the loops stay at -O2).
$(foreach d,solutions labs,$(BUILD)/obj/$(d)/lab06-gemm/%.o): CFLAGS += -O3 -ffp-contract=fast
