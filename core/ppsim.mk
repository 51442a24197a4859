# core/ppsim.mk — pipeline schedules on a clock (`kiln pp-sim`, core/cli/pp_sim.c, over lab
# 11's kn_pp_schedule and the staff simulator core/dist/pp_schedule_sim.c).
#
#   make plot-pp-schedules    lesson 11's figure: GPipe, 1F1B and interleaved 1F1B on 4 ranks
#                             and 8 micro-batches (plots/pp_schedules.sh, gnuplot) into
#                             book/figures/pp-schedules.svg, which is committed
#   make test                 runs test-step-pp-sim-cli (tests/core/test_cli_pp_sim.sh: the
#                             command's lists, bubbles, timeline, errors, and that the
#                             committed figure is what this kiln draws)

.PHONY: plot-pp-schedules test-step-pp-sim-cli
plot-pp-schedules: $(KILN)
	bash plots/pp_schedules.sh $(KILN) book/figures/pp-schedules.svg

TEST_STEPS += test-step-pp-sim-cli
test-step-pp-sim-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) pp-sim-cli bash tests/core/test_cli_pp_sim.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
