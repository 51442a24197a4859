/* check.h — lab 11's tests (public and hidden) see your units through kn_out.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first. Under `make test-lab11` that does nothing; under the
 * grader your run only writes the values, and the staff's build of the same test (no code
 * of yours in it) checks them. So that the tests read as the handout does, each unit
 * function keeps its name: below, a wrapper per unit function calls yours and passes what
 * it returned and wrote (the status and its message, *out, the local shape, the part or the
 * whole value, the actions and their count, the kind's name) through kn_out, and a macro
 * of the unit's name calls the wrapper. kn_pp_simulate (staff code that calls your
 * kn_pp_schedule) is re-derived the same way: your actions through kn_out, then the
 * staff's kn_pp_simulate_lists on them. */
#ifndef LAB11_CHECK_H
#define LAB11_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "kn_test.h"
#include "kiln/pipeline.h"
#include "kiln/placement.h"

static inline kn_status l11_place_rule_matmul(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *out) {
    kn_status st = kn_out_status("kn_place_rule_matmul", kn_place_rule_matmul(nd, ta, tb, a, b, out));
    if (out) kn_out("kn_place_rule_matmul's *out", out, sizeof *out);
    return st;
}

static inline kn_status l11_place_gpt_param(const char *name, kn_placement *out) {
    kn_status st = kn_out_status("kn_place_gpt_param", kn_place_gpt_param(name, out));
    if (out) kn_out("kn_place_gpt_param's *out", out, sizeof *out);
    return st;
}

static inline kn_status l11_place_local_shape(int ndim, const int64_t *shape, kn_placement p, int parts, int64_t *local) {
    kn_status st = kn_out_status("kn_place_local_shape", kn_place_local_shape(ndim, shape, p, parts, local));
    if (local && ndim > 0 && ndim <= KN_MAX_DIMS) kn_out("the local shape", local, sizeof *local * (size_t)ndim);
    return st;
}

/* The elements of a value of shape[0..ndim), over `parts` ranks when p is a shard. */
static inline int64_t l11_numel(int ndim, const int64_t *shape, kn_placement p, int parts) {
    int64_t n = 1;
    for (int d = 0; d < ndim && shape; d++) n *= shape[d];
    return p.kind == KN_PLACE_SHARD && parts > 0 ? n / parts : n;
}

static inline kn_status l11_place_scatter(const float *full, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                                          float *local) {
    kn_status st = kn_out_status("kn_place_scatter", kn_place_scatter(full, ndim, shape, p, parts, rank, local));
    if (st == KN_OK && local) kn_out("the part", local, sizeof *local * (size_t)l11_numel(ndim, shape, p, parts));
    return st;
}

static inline kn_status l11_place_gather(const float *local, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                                         float *full) {
    kn_status st = kn_out_status("kn_place_gather", kn_place_gather(local, ndim, shape, p, parts, rank, full));
    if (st == KN_OK && full) kn_out("the whole value", full, sizeof *full * (size_t)l11_numel(ndim, shape, kn_place_replicate(), 1));
    return st;
}

static inline kn_status l11_pp_kind_parse(const char *s, kn_pp_kind *out) {
    kn_status st = kn_out_status("kn_pp_kind_parse", kn_pp_kind_parse(s, out));
    if (out) kn_out("kn_pp_kind_parse's *out", out, sizeof *out);
    return st;
}

/* The name (or NULL), in one of 8 buffers used in turn (a message may print several). */
static inline const char *l11_pp_kind_name(kn_pp_kind k) {
    static char buf[8][64];
    static int next;
    char *b = buf[next++ % 8];
    const char *r = kn_pp_kind_name(k);
    int32_t none = r == NULL;
    snprintf(b, 64, "%s", r ? r : "");
    kn_out("kn_pp_kind_name answered NULL", &none, sizeof none);
    kn_out_text("kn_pp_kind_name", b, 64);
    return none ? NULL : b;
}

/* The actions: all cap entries of out (the caller's), so writing past *n shows too. */
static inline kn_status l11_pp_schedule(kn_pp_kind k, int p, int m, int v, int rank, kn_pp_action *out, int cap, int *n) {
    kn_status st = kn_out_status("kn_pp_schedule", kn_pp_schedule(k, p, m, v, rank, out, cap, n));
    if (n) kn_out("kn_pp_schedule's *n", n, sizeof *n);
    if (out && cap > 0) kn_out("kn_pp_schedule's actions", out, sizeof *out * (size_t)cap);
    return st;
}

/* kn_pp_simulate as core/dist/pp_schedule_sim.c writes it, on l11_pp_schedule's lists. */
static inline kn_status l11_pp_simulate(kn_pp_kind k, int p, int m, int v, double tf, double tb, kn_pp_sim *out) {
    if (!out || p < 1 || m < 1 || v < 1 || (int64_t)2 * m * v > (1 << 24)) return kn_pp_simulate(k, p, m, v, tf, tb, out);
    int cap = 2 * m * v;
    kn_pp_action *all = calloc((size_t)p * (size_t)cap, sizeof *all);
    const kn_pp_action **lists = calloc((size_t)p, sizeof *lists);
    int *counts = calloc((size_t)p, sizeof *counts);
    cr_assert(all && lists && counts, "l11_pp_simulate: out of memory");
    kn_status st = KN_OK;
    for (int r = 0; r < p && st == KN_OK; r++) {
        lists[r] = all + (size_t)r * (size_t)cap;
        st = l11_pp_schedule(k, p, m, v, r, all + (size_t)r * (size_t)cap, cap, &counts[r]);
    }
    if (st == KN_OK) st = kn_pp_simulate_lists(p, m, v, lists, counts, tf, tb, out);
    free(all), free(lists), free(counts);
    return st;
}

#define kn_place_rule_matmul(...) l11_place_rule_matmul(__VA_ARGS__)
#define kn_place_gpt_param(...) l11_place_gpt_param(__VA_ARGS__)
#define kn_place_local_shape(...) l11_place_local_shape(__VA_ARGS__)
#define kn_place_scatter(...) l11_place_scatter(__VA_ARGS__)
#define kn_place_gather(...) l11_place_gather(__VA_ARGS__)
#define kn_pp_kind_parse(...) l11_pp_kind_parse(__VA_ARGS__)
#define kn_pp_kind_name(...) l11_pp_kind_name(__VA_ARGS__)
#define kn_pp_schedule(...) l11_pp_schedule(__VA_ARGS__)
#define kn_pp_simulate(...) l11_pp_simulate(__VA_ARGS__)

#endif
