/* test_memory.c — lab 08 public tests: the lifetimes of a small schedule, greedy-by-size
 * offsets on a hand example, the ops selective recompute picks, and the GPT step compiled
 * with your memory plan (and your selective remat) against the interpreter. */
#include "check.h"

KN_TEST(lab08_liveness, a_chain_an_input_and_a_dead_value) {
    /* value 0 is an input; step 0: 1 = f(0); step 1: 2 = g(1), 3 = h(1) (3 is never read);
     * step 2: 4 = k(2, 0) */
    const int32_t d0[] = {1}, u0[] = {0}, d1[] = {2, 3}, u1[] = {1, 1}, d2[] = {4}, u2[] = {2, 0};
    kn_mem_step s[3] = {L8_STEP(d0, 1, u0, 1), L8_STEP(d1, 2, u1, 2), L8_STEP(d2, 1, u2, 2)};
    int32_t first[6], last[6];
    KN_ASSERT_OK(kn_mem_liveness(s, 3, 6, first, last));
    const int32_t wf[6] = {-1, 0, 1, 1, 2, -1}, wl[6] = {2, 1, 2, 1, 2, -1};
    for (int v = 0; v < 6; v++)
        cr_assert(first[v] == wf[v] && last[v] == wl[v], "value %d: [%d, %d], want [%d, %d]", v, first[v], last[v], wf[v],
                  wl[v]);
}

/* A kernel may read its own output in the step that writes it (an in-place update, a value
 * stored and read back by the same fused kernel). Such a value is live at that step even
 * when nobody reads it later: with last = -1 (or a last before its first) the plan could
 * give its bytes to another value of the same step, and the step would overwrite its own
 * operand. */
KN_TEST(lab08_liveness, a_read_in_the_step_of_its_write) {
    /* step 0 writes 0 and 1 and reads 1; step 1 writes 2 and reads 0 and 2; step 2 reads 0 */
    const int32_t d0[] = {0, 1}, u0[] = {1}, d1[] = {2}, u1[] = {0, 2}, u2[] = {0};
    kn_mem_step s[3] = {L8_STEP(d0, 2, u0, 1), L8_STEP(d1, 1, u1, 2), L8_STEP(NULL, 0, u2, 1)};
    int32_t first[3] = {9, 9, 9}, last[3] = {9, 9, 9};
    KN_ASSERT_OK(kn_mem_liveness(s, 3, 3, first, last));
    const int32_t wf[3] = {0, 0, 1}, wl[3] = {2, 0, 1};
    for (int v = 0; v < 3; v++)
        cr_assert(first[v] == wf[v] && last[v] == wl[v], "value %d: [%d, %d], want [%d, %d]", v, first[v], last[v], wf[v],
                  wl[v]);
}

KN_TEST(lab08_offsets, largest_first_at_the_lowest_free_offset) {
    /* A (64 bytes, steps 0-1) and B (128, steps 1-2) live together at step 1; C (128,
     * steps 3-4) meets neither and may take B's bytes; D (64, steps 2-3) meets B and C. */
    kn_mem_buffer b[4] = {{64, 0, 1}, {128, 1, 2}, {128, 3, 4}, {64, 2, 3}};
    size_t off[4], arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 4, off, &arena));
    /* order B, C (equal size: lower index first), A, D */
    cr_assert(off[1] == 0 && off[2] == 0, "B then C at 0 (got %zu, %zu)", off[1], off[2]);
    cr_assert_eq(off[0], 128, "A after B (got %zu)", off[0]);
    cr_assert_eq(off[3], 128, "D above B and C (got %zu)", off[3]);
    cr_assert_eq(arena, 192);
    l8_check_plan(b, 4, off, arena);
}

KN_TEST(lab08_recompute, the_cheap_ops_of_a_graph) {
    kn_graph *g = l8_parse("%0 = input {name=\"x\"} : f32[4,8]\n"
                           "%1 = param {name=\"w\"} : f32[8,8]\n"
                           "%2 = matmul %0, %1 : f32[4,8]\n"
                           "%3 = gelu %2 : f32[4,8]\n"
                           "%4 = reshape %3 {shape=[32]} : f32[32]\n"
                           "%5 = sum %4 {axes=[0]} : f32[]\n"
                           "%6 = softmax %3 : f32[4,8]\n"
                           "output %5, %6\n");
    bool r[7];
    memset(r, 0, sizeof r);
    KN_ASSERT_OK(kn_remat_selective(g, r));
    const bool want[7] = {false, false, false, true, true, false, false};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(r[i], want[i], "%%%d = %s: recompute %d, want %d", i, kn_op_name(g->nodes[i].op), r[i], want[i]);
    kn_graph_free(g);
}

/* Over a GPT step: every layernorm is recomputed (a norm reads and writes each element once,
 * as an elementwise op does: Megatron's selective rule keeps none of them), no matmul is. */
KN_TEST(lab08_recompute, the_norms_of_a_gpt_step) {
    kn_gpt_config c = l8_tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    bool *r = calloc((size_t)g->nnodes, sizeof *r);
    KN_ASSERT_OK(kn_remat_selective(g, r));
    int norms = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kn_op op = g->nodes[i].op;
        if (op == KN_OP_LAYERNORM || op == KN_OP_NORMALIZE) {
            norms++;
            cr_assert(r[i], "%%%d = %s: a norm must be recomputed", i, kn_op_name(op));
        }
        if (op == KN_OP_MATMUL) cr_assert(!r[i], "%%%d = matmul must not be recomputed", i);
    }
    cr_assert_gt(norms, 0, "the GPT step has norms");
    free(r);
    kn_graph_free(g);
}

KN_TEST(lab08_compiled, gpt_step_with_your_memory_plan_and_selective_remat, .timeout = 120) {
    kn_gpt_config c = l8_tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_program_stats st;
    double err = l8_compare(g, NULL, 3, &st);
    cr_assert(err <= 2e-5, "the GPT step's loss and gradients differ from the interpreter by %.3g", err);
    cr_assert_gt(st.mem_lower, 0);
    cr_assert_leq(st.mem_lower, st.mem_planned, "no plan beats the most bytes live at once");
    cr_assert_lt(st.mem_planned, 0.5 * st.mem_sum, "lifetimes share the arena: %.0f for %.0f", st.mem_planned, st.mem_sum);
    double none = 0, sel = 0;
    KN_ASSERT_OK(l8_live_bytes(g, "cse,remat:none", &none));
    KN_ASSERT_OK(l8_live_bytes(g, "cse,remat:selective", &sel));
    cr_assert_lt(sel, none, "selective recompute lowers the largest live set: %.0f against %.0f", sel, none);
    err = l8_compare(g, "cse,remat:selective", 3, &st);
    cr_assert(err <= 2e-5, "with selective remat the step differs from the interpreter by %.3g", err);
    kn_graph_free(g);
}
