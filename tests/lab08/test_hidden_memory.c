/* test_hidden_memory.c — lab 08 hidden tests: liveness case by case (reads and writes in
 * one step, values nobody touches, every refusal and that a refusal writes nothing), the
 * offsets on awkward inputs (no buffer, one, zero-size ones, all live at once, holes that a
 * small buffer fills) and against a reference greedy on random lifetimes, the selective
 * decision over every op of a GPT step, and random graphs compiled with your plan. */
#include "../../labs/lab08-memory/tests/check.h"
#include "kiln/codegen.h"

/* ---------------------------------------------------------------- liveness */

KN_TEST(lab08_hidden_liveness, reads_in_the_writing_step_and_repeated_reads) {
    /* step 0 writes 0 and 1 and reads 1 (a kernel reading its own output: same step);
     * step 1 reads 0 three times; step 2 writes 2, read by nobody; step 3 reads 1 */
    const int32_t d0[] = {0, 1}, u0[] = {1}, u1[] = {0, 0, 0}, d2[] = {2}, u3[] = {1};
    kn_mem_step s[4] = {L8_STEP(d0, 2, u0, 1), L8_STEP(NULL, 0, u1, 3), L8_STEP(d2, 1, NULL, 0), L8_STEP(NULL, 0, u3, 1)};
    int32_t first[4] = {9, 9, 9, 9}, last[4] = {9, 9, 9, 9};
    KN_ASSERT_OK(kn_mem_liveness(s, 4, 4, first, last));
    const int32_t wf[4] = {0, 0, 2, -1}, wl[4] = {1, 3, 2, -1};
    for (int v = 0; v < 4; v++)
        cr_assert(first[v] == wf[v] && last[v] == wl[v], "value %d: [%d, %d], want [%d, %d]", v, first[v], last[v], wf[v],
                  wl[v]);
}

KN_TEST(lab08_hidden_liveness, inputs_and_untouched_values) {
    const int32_t u0[] = {3}, d1[] = {0}, u1[] = {3, 2}, u2[] = {2};
    kn_mem_step s[3] = {L8_STEP(NULL, 0, u0, 1), L8_STEP(d1, 1, u1, 2), L8_STEP(NULL, 0, u2, 1)};
    int32_t first[5], last[5];
    KN_ASSERT_OK(kn_mem_liveness(s, 3, 5, first, last));
    const int32_t wf[5] = {1, -1, -1, -1, -1}, wl[5] = {1, -1, 2, 1, -1};
    for (int v = 0; v < 5; v++)
        cr_assert(first[v] == wf[v] && last[v] == wl[v], "value %d: [%d, %d], want [%d, %d]", v, first[v], last[v], wf[v],
                  wl[v]);
    KN_ASSERT_OK(kn_mem_liveness(NULL, 0, 2, first, last)); /* no steps: nobody touches anything */
    cr_assert(first[0] == -1 && last[0] == -1 && first[1] == -1 && last[1] == -1);
    KN_ASSERT_OK(kn_mem_liveness(s, 0, 0, NULL, NULL));
}

static void refused(const kn_mem_step *s, int n, int nv, const char *what) {
    int32_t first[4] = {7, 7, 7, 7}, last[4] = {7, 7, 7, 7};
    KN_ASSERT_ERR(kn_mem_liveness(s, n, nv, first, last), KN_ERR_ARG);
    for (int v = 0; v < 4; v++) cr_assert(first[v] == 7 && last[v] == 7, "%s: a refusal writes nothing (value %d)", what, v);
}

KN_TEST(lab08_hidden_liveness, bad_schedules_are_refused_and_nothing_is_written) {
    const int32_t one[] = {1}, four[] = {4}, neg[] = {-1}, zero[] = {0}, far[] = {1 << 30}, farneg[] = {-(1 << 30)};
    const int32_t zero_far[] = {0, 1 << 30}, zero_farneg[] = {0, -(1 << 30)};
    const struct { kn_mem_step step; const char *what; } one_step[] = { /* schedules of one step */
        {L8_STEP(far, 1, NULL, 0), "a written value far out of range"},
        {L8_STEP(farneg, 1, NULL, 0), "a written value far below 0"},
        {L8_STEP(NULL, 0, far, 1), "a read value far out of range"},
        {L8_STEP(NULL, 0, farneg, 1), "a read value far below 0"},
        {L8_STEP(zero_far, 2, zero_far, 2), "the second written value out of range"},
        {L8_STEP(zero_farneg, 2, zero_farneg, 2), "the second written value below 0"},
        {L8_STEP(zero, 1, NULL, 1), "a NULL read list with a count"},
        {L8_STEP(zero, 1, zero, -1), "a negative read count"},
        {L8_STEP(four, 1, NULL, 0), "written value out of range"},
        {L8_STEP(zero, 1, four, 1), "read value out of range"},
        {L8_STEP(zero, 1, neg, 1), "negative read value"},
        {L8_STEP(neg, 1, NULL, 0), "negative written value"},
        {L8_STEP(NULL, 1, NULL, 0), "a NULL list with a count"},
        {L8_STEP(zero, -1, NULL, 0), "a negative list count"},
    };
    for (size_t i = 0; i < sizeof one_step / sizeof *one_step; i++) refused(&one_step[i].step, 1, 4, one_step[i].what);
    kn_mem_step twice[2] = {L8_STEP(one, 1, NULL, 0), L8_STEP(one, 1, NULL, 0)};
    refused(twice, 2, 4, "written twice");
    const int32_t both[] = {1, 1};
    kn_mem_step twice1[1] = {L8_STEP(both, 2, NULL, 0)};
    refused(twice1, 1, 4, "written twice by one step");
    kn_mem_step early[2] = {L8_STEP(NULL, 0, one, 1), L8_STEP(one, 1, zero, 1)};
    refused(early, 2, 4, "read before written");
    kn_mem_step ok[1] = {L8_STEP(zero, 1, NULL, 0)};
    refused(ok, -1, 4, "negative step count");
    refused(ok, 1, -1, "negative value count");
    refused(NULL, 1, 4, "NULL steps");
    int32_t f[4];
    KN_ASSERT_ERR(kn_mem_liveness(ok, 1, 4, f, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_mem_liveness(ok, 1, 4, NULL, f), KN_ERR_ARG);
}

/* Every allocation failing in turn: a clean KN_ERR_OOM that writes nothing, no leak; and no
 * leak when it succeeds or refuses. */
KN_TEST(lab08_hidden_liveness, out_of_memory_and_leaks) {
    const int32_t d0[] = {1}, u0[] = {0}, d1[] = {2}, u1[] = {1};
    kn_mem_step s[2] = {L8_STEP(d0, 1, u0, 1), L8_STEP(d1, 1, u1, 1)};
    int32_t first[3], last[3];
    long live = kn_alloc_live();
    bool done = false;
    for (int k = 0; k < 16 && !done; k++) {
        for (int v = 0; v < 3; v++) first[v] = last[v] = 7;
        kn_alloc_fail_after(k);
        kn_status st = kn_mem_liveness(s, 2, 3, first, last);
        kn_alloc_fail_after(-1);
        cr_assert_eq(kn_alloc_live(), live, "allocation %d failing: a leak", k);
        if (st == KN_OK) { done = true; break; }
        cr_assert_eq(st, KN_ERR_OOM, "allocation %d failing: KN_ERR_OOM, got %s", k, kn_status_name(st));
        for (int v = 0; v < 3; v++) cr_assert(first[v] == 7 && last[v] == 7, "an allocation failed: nothing written");
    }
    cr_assert(done);
    cr_assert(first[2] == 1 && last[2] == 1 && first[0] == -1 && last[0] == 0);
    kn_mem_step twice[2] = {L8_STEP(d0, 1, NULL, 0), L8_STEP(d0, 1, NULL, 0)};
    KN_ASSERT_ERR(kn_mem_liveness(twice, 2, 3, first, last), KN_ERR_ARG);
    cr_assert_eq(kn_alloc_live(), live, "a refusal leaks nothing");
}

/* The lifetimes against a brute-force reading of a random schedule. */
KN_TEST(lab08_hidden_liveness, random_schedules) {
    srand(8);
    for (int trial = 0; trial < 50; trial++) {
        enum { NV = 40, NS = 30 };
        int32_t defs[NS][NV], uses[NS][8], wf[NV], wl[NV];
        int nd[NS] = {0}, nu[NS] = {0};
        for (int v = 0; v < NV; v++) wf[v] = wl[v] = -1;
        int next = 0;
        for (int s = 0; s < NS; s++) {
            for (int k = 0; k < 1 + rand() % 2 && next < NV; k++) { defs[s][nd[s]++] = next; wf[next] = wl[next] = s; next++; }
            for (int k = 0; k < rand() % 5 && next > 0; k++) {
                int32_t v = rand() % next;
                uses[s][nu[s]++] = v;
                wl[v] = s;
            }
        }
        kn_mem_step st[NS];
        for (int s = 0; s < NS; s++) st[s] = L8_STEP(defs[s], nd[s], uses[s], nu[s]);
        int32_t first[NV], last[NV];
        KN_ASSERT_OK(kn_mem_liveness(st, NS, NV, first, last));
        for (int v = 0; v < NV; v++)
            cr_assert(first[v] == wf[v] && last[v] == wl[v], "trial %d value %d: [%d, %d], want [%d, %d]", trial, v,
                      first[v], last[v], wf[v], wl[v]);
    }
}

/* ---------------------------------------------------------------- offsets */

KN_TEST(lab08_hidden_offsets, no_buffer_and_one_buffer) {
    size_t arena = 99, off[1] = {99};
    KN_ASSERT_OK(kn_mem_assign_offsets(NULL, 0, NULL, &arena));
    cr_assert_eq(arena, 0, "no buffers: an empty arena");
    kn_mem_buffer one = {4096, 3, 3};
    KN_ASSERT_OK(kn_mem_assign_offsets(&one, 1, off, &arena));
    cr_assert(off[0] == 0 && arena == 4096, "one buffer at 0 (got %zu, arena %zu)", off[0], arena);
}

KN_TEST(lab08_hidden_offsets, zero_size_buffers) {
    kn_mem_buffer b[4] = {{0, 0, 5}, {64, 0, 5}, {0, 2, 3}, {128, 1, 4}};
    size_t off[4] = {7, 7, 7, 7}, arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 4, off, &arena));
    cr_assert(off[0] == 0 && off[2] == 0, "a zero-size buffer sits at 0 (got %zu, %zu)", off[0], off[2]);
    cr_assert(off[3] == 0 && off[1] == 128 && arena == 192, "got %zu %zu arena %zu", off[3], off[1], arena);
    kn_mem_buffer z[3] = {{0, 0, 0}, {0, 0, 0}, {0, 1, 2}};
    KN_ASSERT_OK(kn_mem_assign_offsets(z, 3, off, &arena));
    cr_assert(arena == 0 && off[0] == 0 && off[1] == 0 && off[2] == 0, "only empty buffers: an empty arena");
}

KN_TEST(lab08_hidden_offsets, all_live_at_once_stack_up_largest_first) {
    kn_mem_buffer b[5] = {{64, 0, 9}, {256, 0, 9}, {128, 0, 9}, {256, 0, 9}, {192, 0, 9}};
    size_t off[5], arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 5, off, &arena));
    const size_t want[5] = {832, 0, 704, 256, 512}; /* 1 and 3 (256, lower index first), 4, 2, 0 */
    for (int i = 0; i < 5; i++) cr_assert_eq(off[i], want[i], "buffer %d at %zu, want %zu", i, off[i], want[i]);
    cr_assert_eq(arena, 896, "everything live at once: the arena is the sum");
    l8_check_plan(b, 5, off, arena);
}

KN_TEST(lab08_hidden_offsets, a_small_buffer_fills_a_hole) {
    /* 0 (256, steps 0-2) at 0; 1 (256, steps 4-6) at 0; 2 (128, steps 2-4) meets both: 256;
     * 3 (64, step 3) meets only 2: the hole at 0; 4 (64, step 7) meets nobody: 0;
     * 5 (128, steps 1-5) meets 0, 1, 2, 3: 384 */
    kn_mem_buffer b[6] = {{256, 0, 2}, {256, 4, 6}, {128, 2, 4}, {64, 3, 3}, {64, 7, 7}, {128, 1, 5}};
    size_t off[6], arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 6, off, &arena));
    const size_t want[6] = {0, 0, 256, 0, 0, 384};
    for (int i = 0; i < 6; i++) cr_assert_eq(off[i], want[i], "buffer %d at %zu, want %zu", i, off[i], want[i]);
    cr_assert_eq(arena, 512);
    l8_check_plan(b, 6, off, arena);
}

KN_TEST(lab08_hidden_offsets, the_lowest_gap_that_holds_it) {
    /* all five meet at step 5: the three of 100 bytes stack up at 0, 100, 200, the 60 above
     * them, the 50 above the 60 (smaller buffers come later, whatever their index) */
    kn_mem_buffer b[5] = {{100, 5, 5}, {100, 5, 5}, {100, 0, 9}, {60, 5, 5}, {50, 4, 6}};
    size_t off[5], arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 5, off, &arena));
    cr_assert(off[0] == 0 && off[1] == 100 && off[2] == 200, "got %zu %zu %zu", off[0], off[1], off[2]);
    cr_assert_eq(off[3], 300, "60 bytes: after the three hundred-byte buffers (got %zu)", off[3]);
    cr_assert_eq(off[4], 360, "50 bytes: after the 60 (got %zu)", off[4]);
    l8_check_plan(b, 5, off, arena);
    /* the middle 100 dies at step 1: the 50 living at steps 2-3 takes its bytes */
    kn_mem_buffer h[4] = {{100, 0, 9}, {100, 0, 1}, {100, 0, 9}, {50, 2, 3}};
    KN_ASSERT_OK(kn_mem_assign_offsets(h, 4, off, &arena));
    cr_assert(off[0] == 0 && off[1] == 100 && off[2] == 200 && off[3] == 100, "the freed middle takes the 50: %zu %zu %zu %zu",
              off[0], off[1], off[2], off[3]);
    cr_assert_eq(arena, 300);
}

/* Sizes are bytes as given: odd ones too (the core rounds up to 64, the unit does not). */
KN_TEST(lab08_hidden_offsets, odd_sizes_are_taken_as_they_are) {
    kn_mem_buffer b[4] = {{3, 0, 2}, {1, 1, 3}, {1, 2, 2}, {2, 4, 5}};
    size_t off[4], arena = 0;
    KN_ASSERT_OK(kn_mem_assign_offsets(b, 4, off, &arena));
    const size_t want[4] = {0, 3, 4, 0};
    for (int i = 0; i < 4; i++) cr_assert_eq(off[i], want[i], "buffer %d at %zu, want %zu", i, off[i], want[i]);
    cr_assert_eq(arena, 5);
    l8_check_plan(b, 4, off, arena);
}

KN_TEST(lab08_hidden_offsets, bad_lifetimes_are_refused_and_nothing_is_written) {
    kn_mem_buffer b[2] = {{64, 0, 1}, {64, 3, 2}};
    size_t off[2] = {7, 7}, arena = 7;
    KN_ASSERT_ERR(kn_mem_assign_offsets(b, 2, off, &arena), KN_ERR_ARG);
    cr_assert(off[0] == 7 && off[1] == 7 && arena == 7, "a refusal writes nothing");
    KN_ASSERT_ERR(kn_mem_assign_offsets(b, -1, off, &arena), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_mem_assign_offsets(b, 1, off, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_mem_assign_offsets(b, 1, NULL, &arena), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_mem_assign_offsets(NULL, 1, off, &arena), KN_ERR_ARG);
    cr_assert_eq(arena, 7);
}

KN_TEST(lab08_hidden_offsets, out_of_memory_and_leaks) {
    kn_mem_buffer b[3] = {{64, 0, 1}, {128, 1, 2}, {64, 2, 3}};
    size_t off[3], arena = 7;
    long live = kn_alloc_live();
    bool done = false;
    for (int k = 0; k < 16 && !done; k++) {
        off[0] = off[1] = off[2] = 7;
        arena = 7;
        kn_alloc_fail_after(k);
        kn_status st = kn_mem_assign_offsets(b, 3, off, &arena);
        kn_alloc_fail_after(-1);
        cr_assert_eq(kn_alloc_live(), live, "allocation %d failing: a leak", k);
        if (st == KN_OK) { done = true; break; }
        cr_assert_eq(st, KN_ERR_OOM, "allocation %d failing: KN_ERR_OOM, got %s", k, kn_status_name(st));
        cr_assert(arena == 7 && off[0] == 7 && off[1] == 7 && off[2] == 7, "an allocation failed: nothing written");
    }
    cr_assert(done);
    cr_assert(off[1] == 0 && off[0] == 128 && off[2] == 128 && arena == 192, "%zu %zu %zu %zu", off[0], off[1], off[2],
              arena);
}

/* The reference: largest first, each at the lowest offset found by trying 0 and the end of
 * every conflicting placed buffer (the lowest fit is one of those). */
static void reference(const kn_mem_buffer *b, int n, size_t *off, size_t *arena) {
    int order[64];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* a stable insertion sort by size, descending */
        for (int j = i; j > 0 && b[order[j]].size > b[order[j - 1]].size; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    *arena = 0;
    for (int k = 0; k < n; k++) {
        int v = order[k];
        size_t best = (size_t)-1;
        for (int c = -1; c < k; c++) {
            size_t cand = c < 0 ? 0 : off[order[c]] + b[order[c]].size;
            bool ok = true;
            for (int j = 0; j < k && ok; j++) {
                int u = order[j];
                bool time = b[u].first <= b[v].last && b[v].first <= b[u].last;
                ok = !(time && off[u] < cand + b[v].size && cand < off[u] + b[u].size);
            }
            if (ok && cand < best) best = cand;
        }
        off[v] = b[v].size ? best : 0;
        if (off[v] + b[v].size > *arena) *arena = off[v] + b[v].size;
    }
}

KN_TEST(lab08_hidden_offsets, random_lifetimes_match_the_greedy_rule) {
    srand(80);
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + rand() % 40;
        kn_mem_buffer b[64];
        for (int i = 0; i < n; i++) {
            int f = rand() % 20, len = rand() % 6;
            b[i] = (kn_mem_buffer){(size_t)(rand() % 5 == 0 ? 0 : 64 * (1 + rand() % 6)), f, f + len};
        }
        size_t off[64], want[64], arena = 0, warena = 0;
        KN_ASSERT_OK(kn_mem_assign_offsets(b, n, off, &arena));
        reference(b, n, want, &warena);
        l8_check_plan(b, n, off, arena);
        for (int i = 0; i < n; i++)
            cr_assert_eq(off[i], want[i], "trial %d buffer %d (%zu bytes, steps %d..%d): offset %zu, the greedy rule gives "
                         "%zu", trial, i, b[i].size, b[i].first, b[i].last, off[i], want[i]);
        cr_assert_eq(arena, warena);
    }
}

/* ---------------------------------------------------------------- selective recompute */

KN_TEST(lab08_hidden_recompute, every_op_of_a_gpt_step) {
    kn_gpt_config c = l8_tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    KN_ASSERT_OK(kn_pass_decompose(g, NULL)); /* the primitives too: causal_fill, max, ... */
    bool *r = calloc((size_t)g->nnodes, sizeof *r);
    bool seen[KN_OP_COUNT] = {false};
    KN_ASSERT_OK(kn_remat_selective(g, r));
    for (int i = 0; i < g->nnodes; i++) {
        kn_op op = g->nodes[i].op;
        kn_op_category cat = kn_op_get(op)->category;
        bool want = cat == KN_CAT_ELEMENTWISE || cat == KN_CAT_VIEW || op == KN_OP_FULL || op == KN_OP_LAYERNORM ||
                    op == KN_OP_NORMALIZE;
        cr_assert_eq(r[i], want, "%%%d = %s: recompute %d, want %d", i, kn_op_name(op), r[i], want);
        seen[op] = true;
    }
    cr_assert(seen[KN_OP_MATMUL] && seen[KN_OP_INPUT] && seen[KN_OP_PARAM] && seen[KN_OP_FULL] && seen[KN_OP_SUM]);
    free(r);
    kn_graph_free(g);
    g = l8_parse("%0 = input {name=\"x\"} : f32[4,8]\n"
                 "%1 = param {name=\"g\"} : f32[8]\n"
                 "%2 = param {name=\"b\"} : f32[8]\n"
                 "%3 = layernorm %0, %1, %2 {eps=1e-05} : f32[4,8]\n"
                 "%4 = dropout %3 {p=0.1, seed=1} : f32[4,8]\n"
                 "%5 = permute %4 {perm=[1,0]} : f32[8,4]\n"
                 "%6 = max %5 {axes=[1]} : f32[8]\n"
                 "output %6\n");
    bool q[7];
    memset(q, 1, sizeof q);
    KN_ASSERT_OK(kn_remat_selective(g, q));
    const bool want[7] = {false, false, false, true, true, true, false};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(q[i], want[i], "%%%d = %s: recompute %d, want %d", i, kn_op_name(g->nodes[i].op), q[i], want[i]);
    KN_ASSERT_ERR(kn_remat_selective(NULL, q), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_remat_selective(g, NULL), KN_ERR_ARG);
    kn_graph_free(g);
}

KN_TEST(lab08_hidden_recompute, selective_remat_keeps_the_bits) {
    kn_gpt_config c = l8_tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_graph *h = NULL;
    KN_ASSERT_OK(kn_graph_copy(&h, g));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_out_status("kn_passes_run", kn_passes_run(h, "cse,remat:selective", &rep)));
    kn_out_graph("the graph after remat:selective", &h);
    cr_assert_gt(h->nnodes, g->nnodes, "selective recomputes something");
    double d = -1;
    KN_ASSERT_OK(kn_graph_compare(g, h, 5, &d));
    cr_assert_eq(d, 0, "a recomputed value has the same bits: %.3g", d);
    kn_graph_free(h);
    kn_graph_free(g);
}

/* ---------------------------------------------------------------- compiled programs */

KN_TEST(lab08_hidden_compiled, random_graphs_with_your_plan, .timeout = 240) {
    kn_randgraph_opts ro = kn_randgraph_defaults();
    for (int s = 0; s < 40; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s, &ro));
        kn_program_stats st;
        double err = l8_compare(g, NULL, (uint64_t)s + 1, &st);
        cr_assert(err <= 1e-4, "seed %d: the compiled program differs from the interpreter by %.3g", s, err);
        cr_assert_leq(st.mem_lower, st.mem_planned, "seed %d", s);
        cr_assert_leq(st.mem_planned, st.mem_sum, "seed %d", s);
        kn_graph_free(g);
    }
}

KN_TEST(lab08_hidden_compiled, the_gpt_step_plan_per_step, .timeout = 120) {
    l8_cache();
    kn_gpt_config c = l8_tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_program_opts o = {.device = KN_CPU, .passes = "cse,remat:full", .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    /* your plan: the program's stats and memory table through kn_out (the checker compiles nothing) */
    const bool mine = !kn_out_checking();
    if (mine) KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_program_stats st = mine ? kn_program_get_stats(p) : (kn_program_stats){0};
    kn_out("the program's stats", &st, sizeof st);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (mine) KN_ASSERT_OK(kn_program_memory_tsv(f, p));
    fclose(f);
    kn_out_malloc_text("the program's memory table", &buf, &len);
    double peak = 0;
    int lines = 0;
    for (char *q = strchr(buf, '\n'); q && q[1]; q = strchr(q + 1, '\n')) {
        double live = 0, top = 0;
        cr_assert_eq(sscanf(q + 1, "%*d %lf %lf", &live, &top), 2);
        cr_assert_leq(live, top, "the live bytes fit below the arena's top at every step");
        cr_assert_leq(top, st.mem_planned);
        if (live > peak) peak = live;
        lines++;
    }
    cr_assert_eq(lines, st.nsteps);
    cr_assert_eq(peak, st.mem_lower, "the lower bound is the peak of the live bytes");
    cr_assert_leq(st.mem_planned, 1.5 * st.mem_lower, "greedy by size stays near the bound: %.0f against %.0f",
                  st.mem_planned, st.mem_lower);
    free(buf);
    kn_program_free(p);
    double err = l8_compare(g, "cse,remat:full", 4, NULL);
    cr_assert(err <= 2e-5, "%.3g", err);
    kn_graph_free(g);
}
