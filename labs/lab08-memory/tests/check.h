/* check.h — helpers for lab 08's tests (public and hidden): schedules written as lists,
 * a reference check of an offset assignment (no two buffers live at once overlap), and
 * compiled programs, whose memory plan your units make, against the interpreter.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first. Under `make test-lab08` that does nothing; under the
 * grader your run only writes the values, and the staff's build of the same test (no code
 * of yours in it) checks them. Each unit function keeps its name in the tests: at the end
 * of this file a macro of the unit's name calls a wrapper (l8_*) that calls yours and
 * passes what it returned and wrote through kn_out; so does kn_alloc_live (the leak
 * checks count your run's allocations). The compiled programs go through kn_out_compare
 * (tests/harness/kn_out_program.h). */
#ifndef LAB08_CHECK_H
#define LAB08_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static inline void l8_cache(void) {
    char d[96];
    snprintf(d, sizeof d, "/tmp/kiln-test-cache-%ld", (long)getuid());
    setenv("KILN_CACHE_DIR", d, 0);
}

static inline kn_graph *l8_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* A step that writes d[0..nd) and reads u[0..nu). */
#define L8_STEP(d, nd, u, nu) ((kn_mem_step){(d), (nd), (u), (nu)})

/* 1 when buffers i and j are live at a common step and their bytes intersect. */
static inline int l8_conflict(const kn_mem_buffer *b, const size_t *off, int i, int j) {
    bool time = b[i].first <= b[j].last && b[j].first <= b[i].last;
    return time && off[i] < off[j] + b[j].size && off[j] < off[i] + b[i].size;
}

/* The most bytes live at one step: no arena is smaller. */
static inline size_t l8_lower_bound(const kn_mem_buffer *b, int n) {
    size_t best = 0;
    for (int i = 0; i < n; i++) { /* the live set is largest at some buffer's first step */
        size_t live = 0;
        for (int j = 0; j < n; j++) live += b[j].first <= b[i].first && b[i].first <= b[j].last ? b[j].size : 0;
        if (live > best) best = live;
    }
    return best;
}

/* Check a plan: no conflicts, the arena is the highest end, and the bound holds. */
static inline void l8_check_plan(const kn_mem_buffer *b, int n, const size_t *off, size_t arena) {
    size_t top = 0;
    for (int i = 0; i < n; i++) {
        if (b[i].size && off[i] + b[i].size > top) top = off[i] + b[i].size;
        for (int j = 0; j < i; j++)
            cr_assert(!l8_conflict(b, off, i, j), "buffers %d ([%zu, +%zu) steps %d..%d) and %d ([%zu, +%zu) steps %d..%d) "
                      "overlap while both live", i, off[i], b[i].size, b[i].first, b[i].last, j, off[j], b[j].size,
                      b[j].first, b[j].last);
    }
    cr_assert_eq(arena, top, "the arena ends at the highest buffer's end: %zu, got %zu", top, arena);
    cr_assert_geq(arena, l8_lower_bound(b, n));
}

/* A compiled program (your plan) against the interpreter: the largest relative error. */
static inline double l8_compare(const kn_graph *g, const char *passes, uint64_t seed, kn_program_stats *st) {
    l8_cache();
    kn_program_opts o = {.device = KN_CPU, .passes = passes, .mode = KN_PROGRAM_COMPILED};
    return kn_out_compare(g, &o, seed, st);
}

/* kn_passes_live_bytes (your remat and plan inside): its status and bytes through kn_out. */
static inline kn_status l8_live_bytes(const kn_graph *g, const char *passes, double *bytes) {
    kn_status st = kn_out_status("kn_passes_live_bytes", kn_passes_live_bytes(g, passes, bytes));
    kn_out("the largest live set", bytes, sizeof *bytes);
    return st;
}

static inline kn_gpt_config l8_tiny(void) {
    return (kn_gpt_config){.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2};
}

/* ---------------------------------------------------------------- your units, through kn_out */

static inline kn_status l8_mem_liveness(const kn_mem_step *steps, int nsteps, int nvalues, int32_t *first, int32_t *last) {
    kn_status st = kn_out_status("kn_mem_liveness", kn_mem_liveness(steps, nsteps, nvalues, first, last));
    size_t n = nvalues > 0 && nvalues <= (1 << 20) ? (size_t)nvalues : 0;
    if (first) kn_out("kn_mem_liveness's first", first, n * sizeof *first);
    if (last) kn_out("kn_mem_liveness's last", last, n * sizeof *last);
    return st;
}

static inline kn_status l8_mem_assign_offsets(const kn_mem_buffer *bufs, int n, size_t *offsets, size_t *arena) {
    kn_status st = kn_out_status("kn_mem_assign_offsets", kn_mem_assign_offsets(bufs, n, offsets, arena));
    if (offsets) kn_out("kn_mem_assign_offsets's offsets", offsets, (n > 0 && n <= (1 << 20) ? (size_t)n : 0) * sizeof *offsets);
    if (arena) kn_out("kn_mem_assign_offsets's arena", arena, sizeof *arena);
    return st;
}

static inline kn_status l8_remat_selective(const kn_graph *g, bool *recompute) {
    kn_status st = kn_out_status("kn_remat_selective", kn_remat_selective(g, recompute));
    if (g && recompute) kn_out("kn_remat_selective's recompute", recompute, (size_t)g->nnodes * sizeof *recompute);
    return st;
}

#define kn_mem_liveness(...) l8_mem_liveness(__VA_ARGS__)
#define kn_mem_assign_offsets(...) l8_mem_assign_offsets(__VA_ARGS__)
#define kn_remat_selective(...) l8_remat_selective(__VA_ARGS__)
#define kn_alloc_live() ((long)kn_out_i64("kn_alloc_live()", kn_alloc_live()))

#endif
