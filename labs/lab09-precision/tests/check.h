/* check.h — helpers for lab 09's tests (public and hidden): the core's rounding from f64
 * (the reference your units must equal), f32 values from their bits, a reference model of
 * the loss scaler's rule, a tiny GPT trainer with loss scaling, and graphs for the
 * autocast pass (a builder, the pass run on a copy, the casts it made).
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first. Under `make test-lab09` that does nothing; under the
 * grader your run only writes the values, and the staff's build of the same test (no code
 * of yours in it) checks them. Each unit function keeps its name in the tests: at the end
 * of this file a macro of the unit's name calls a wrapper (l9_*) that calls yours and
 * passes its results through kn_out. The roundings, called millions of times, are judged
 * by a digest of all of them (L9_ROUNDINGS_JUDGED, at the end of each test that uses
 * L9_ROUNDS_LIKE_THE_REFERENCE or l9_bf16/l9_f16):
 * your run checks each one against the reference as before; the checker compares the
 * digest of yours with the digest of the reference's. */
#ifndef LAB09_CHECK_H
#define LAB09_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/passes.h"

static inline float l9_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline uint32_t l9_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* kiln's message when a unit left one (a skeleton's "not implemented (lab09: ...)"), else "". */
static inline const char *l9_why(void) { return kn_last_error(); }

/* The rounding of x computed from its exact value in double by the core (one rounding,
 * to nearest, ties to even): what your units must return, bit for bit. */
static inline uint16_t l9_bf16_want(float x) { return kn_f64_to_bf16((double)x); }
static inline uint16_t l9_f16_want(float x) { return kn_f64_to_f16((double)x); }

/* Digests of the roundings made in this test (a test is a process of its own): yours, and
 * the reference's for the same inputs. */
static uint64_t l9_digest_mine = 0x243F6A8885A308D3u, l9_digest_want = 0x243F6A8885A308D3u;
static inline void l9_mix(uint64_t *h, uint16_t v) {
    uint64_t z = (*h ^ v) * 0x9E3779B97F4A7C15u;
    *h = z ^ (z >> 29);
}
/* Your rounding of x (in the checker the reference's: the checker judges the digest). */
static inline uint16_t l9_bf16(float x) {
    uint16_t want = l9_bf16_want(x), got = kn_out_checking() ? want : kn_f32_to_bf16(x);
    l9_mix(&l9_digest_mine, got);
    l9_mix(&l9_digest_want, want);
    return got;
}
static inline uint16_t l9_f16(float x) {
    uint16_t want = l9_f16_want(x), got = kn_out_checking() ? want : kn_f32_to_f16(x);
    l9_mix(&l9_digest_mine, got);
    l9_mix(&l9_digest_want, want);
    return got;
}
/* The end of a test that rounds: the digest of your roundings through kn_out, against the
 * reference's. */
#define L9_ROUNDINGS_JUDGED()                                                                                      \
    cr_assert((uint64_t)kn_out_i64("a digest of your roundings", (int64_t)l9_digest_mine) == l9_digest_want,     \
              "your roundings differ from the reference's (your run's own check names the first)")

/* Both units on x against the reference; the first difference fails the test. */
#define L9_ROUNDS_LIKE_THE_REFERENCE(x)                                                                            \
    do {                                                                                                           \
        float x_ = (x);                                                                                            \
        kn_clear_error();                                                                                          \
        uint16_t b_ = l9_bf16(x_), h_ = l9_f16(x_);                                                                \
        cr_assert_eq(b_, l9_bf16_want(x_), "kn_f32_to_bf16(%a = 0x%08x) = 0x%04x, want 0x%04x %s", (double)x_,     \
                     l9_bits(x_), b_, l9_bf16_want(x_), l9_why());                                                 \
        cr_assert_eq(h_, l9_f16_want(x_), "kn_f32_to_f16(%a = 0x%08x) = 0x%04x, want 0x%04x %s", (double)x_,       \
                     l9_bits(x_), h_, l9_f16_want(x_), l9_why());                                                  \
    } while (0)

/* The scaler's rule written out once more, plainly (kiln/optim.h): for comparing long runs. */
static inline void l9_scaler_model(kn_loss_scaler *s, bool found_inf) {
    if (s->mode == KN_LOSS_SCALE_NONE) return;
    if (found_inf) {
        s->skipped += 1;
        s->good_steps = 0;
        if (s->mode == KN_LOSS_SCALE_DYNAMIC) s->scale = fmax(s->scale * s->backoff_factor, s->min_scale);
        return;
    }
    s->good_steps += 1;
    if (s->mode == KN_LOSS_SCALE_DYNAMIC && s->good_steps == s->growth_interval) {
        s->scale = fmin(s->scale * s->growth_factor, s->max_scale);
        s->good_steps = 0;
    }
}

#define L9_SAME_SCALER(a, b, what)                                                                                 \
    cr_assert((a).scale == (b).scale && (a).good_steps == (b).good_steps && (a).skipped == (b).skipped,            \
              "%s: scale %g, good_steps %lld, skipped %lld; want %g, %lld, %lld", what, (a).scale,                \
              (long long)(a).good_steps, (long long)(a).skipped, (b).scale, (long long)(b).good_steps,            \
              (long long)(b).skipped)

/* A tiny GPT and its trainer (AdamW, clip 1, graph mode), seed 8. */
static const kn_gpt_config L9_GPT = {.vocab = 7, .context = 8, .layers = 1, .width = 8, .heads = 2};
enum { L9_B = 2, L9_T = 8, L9_NTOK = 300 };

static inline void l9_trainer(kn_gpt *g, kn_trainer *t) {
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_gpt_new(g, &L9_GPT));
    kn_gpt_init(g, 8);
    KN_ASSERT_OK(kn_trainer_new(t, g, L9_B, L9_T, &oc, 1.0));
}

/* The same with a dynamic loss scale starting at `scale`, growing every `interval` steps. */
static inline void l9_scaled_trainer(kn_gpt *g, kn_trainer *t, double scale, int64_t interval) {
    l9_trainer(g, t);
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = scale, s.growth_interval = interval;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(t, &s));
}

/* Training step s on a fixed token stream; *loss and *gn may be NULL. The step's status,
 * loss and norm go through kn_out (l9_step) or not (l9_step_ref: a trainer whose every
 * value the checker computes itself, the unscaled one a scaled run is compared with). */
static inline void l9_step_as(kn_trainer *t, int s, double *loss, double *gn, bool yours) {
    int32_t toks[L9_NTOK], x[L9_B * L9_T], y[L9_B * L9_T];
    for (int i = 0; i < L9_NTOK; i++) toks[i] = (i * i + 3 * i) % 7;
    KN_ASSERT_OK(kn_batch_sample(toks, L9_NTOK, L9_B, L9_T, 77, 0, s, x, y));
    if (!yours) {
        KN_ASSERT_OK(kn_trainer_step(t, x, y, 1e-2, loss, gn));
        return;
    }
    KN_ASSERT_OK(kn_out_status("kn_trainer_step", kn_trainer_step(t, x, y, 1e-2, loss, gn)));
    if (loss) kn_out("the step's loss", loss, sizeof *loss);
    if (gn) kn_out("the step's gradient norm", gn, sizeof *gn);
}
static inline void l9_step(kn_trainer *t, int s, double *loss, double *gn) { l9_step_as(t, s, loss, gn, true); }
static inline void l9_step_ref(kn_trainer *t, int s, double *loss, double *gn) { l9_step_as(t, s, loss, gn, false); }

/* The trainer's state your scaler decided: its scaler, the skip flag, the optimizer's step,
 * the parameters, through kn_out. */
static inline void l9_out_trainer(kn_trainer *t, kn_gpt *g) {
    kn_out("the trainer's scaler", &t->scaler, sizeof t->scaler);
    kn_out("the trainer's skip flag", &t->skipped, sizeof t->skipped);
    kn_out("the optimizer's step", &t->opt.step, sizeof t->opt.step);
    kn_out("the parameters", g->p.data, (size_t)g->p.n * sizeof(float));
}

/* ---------------------------------------------------------------- autocast */

static inline kn_builder *l9_builder(void) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    return b;
}

/* Finish b with the given outputs; the graph must verify. */
static inline kn_graph *l9_finish(kn_builder *b, int nout, const kn_val *outs) {
    for (int i = 0; i < nout; i++) kn_builder_output(b, outs[i]);
    kn_graph *g;
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* A copy of g after autocast:bf16 or autocast:fp16 (verified); *casts (may be NULL) gets
 * the pass's count of casts inserted. */
static inline kn_graph *l9_autocast(const kn_graph *g, const char *list, int64_t *casts) {
    kn_graph *c;
    kn_pass_report rep;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    kn_status st = kn_out_status("kn_passes_run", kn_passes_run(c, list, &rep));
    cr_assert_eq(st, KN_OK, "%s: %s", list, kn_last_error());
    kn_out_graph("the graph after autocast", &c);
    KN_ASSERT_OK(kn_graph_verify(c));
    if (casts) {
        *casts = 0;
        for (int r = 0; r < rep.pass[0].nfired; r++)
            if (!strcmp(rep.pass[0].rule[r], "casts")) *casts = rep.pass[0].count[r];
        kn_out("the casts inserted", casts, sizeof *casts);
    }
    return c;
}

/* The node of g that is op `op`, the k-th such (k from 0); -1 if none. */
static inline int32_t l9_nth(const kn_graph *g, kn_op op, int k) {
    for (int32_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == op && k-- == 0) return i;
    return -1;
}

/* The cast node of g that reads value v and makes dtype dt; -1 if none. Fails the test
 * when there are two (one cast per value and dtype). */
static inline int32_t l9_cast_of(const kn_graph *g, int32_t v, kn_dtype dt) {
    int32_t found = -1;
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_CAST || n->in[0] != v || n->type.dtype != dt) continue;
        cr_assert(found < 0, "%%%d and %%%d both cast %%%d to %s", found, i, v, kn_dtype_name(dt));
        found = i;
    }
    return found;
}

/* ---------------------------------------------------------------- your units, through kn_out */

static inline kn_autocast_class l9_autocast_policy(kn_op op) {
    int32_t c = (int32_t)kn_autocast_policy(op);
    kn_out("kn_autocast_policy", &c, sizeof c);
    return (kn_autocast_class)c;
}

/* dt, reads_low and early: all g->nnodes entries (the caller's arrays). */
static inline kn_status l9_autocast_decide(const kn_graph *g, int32_t i, kn_dtype low, kn_dtype *dt, bool *reads_low,
                                           bool *early) {
    kn_status st = kn_out_status("kn_autocast_decide", kn_autocast_decide(g, i, low, dt, reads_low, early));
    size_t n = g ? (size_t)g->nnodes : 0;
    if (dt) kn_out("kn_autocast_decide's dt", dt, n * sizeof *dt);
    if (reads_low) kn_out("kn_autocast_decide's reads_low", reads_low, n * sizeof *reads_low);
    if (early) kn_out("kn_autocast_decide's early", early, n * sizeof *early);
    return st;
}

static inline kn_status l9_loss_scale_update(kn_loss_scaler *s, bool found_inf) {
    kn_status st = kn_out_status("kn_loss_scale_update", kn_loss_scale_update(s, found_inf));
    if (s) kn_out("the scaler", s, sizeof *s);
    return st;
}

/* kn_dtype_convert (core) rounds with your units: its result through kn_out. */
static inline void l9_convert(kn_dtype to, void *dst, kn_dtype from, const void *src, int64_t n) {
    kn_dtype_convert(to, dst, from, src, n);
    kn_out("the converted values", dst, (size_t)n * kn_dtype_size(to));
}

/* A rounding checked on its own (not against the reference bit for bit: a NaN's payload,
 * a table of cases): the value through kn_out. */
static inline uint16_t l9_bf16_out(float x) {
    uint16_t v = kn_f32_to_bf16(x);
    kn_out("kn_f32_to_bf16", &v, sizeof v);
    return v;
}
static inline uint16_t l9_f16_out(float x) {
    uint16_t v = kn_f32_to_f16(x);
    kn_out("kn_f32_to_f16", &v, sizeof v);
    return v;
}

#define kn_f32_to_bf16(x) l9_bf16_out(x)
#define kn_f32_to_f16(x) l9_f16_out(x)
#define kn_autocast_policy(...) l9_autocast_policy(__VA_ARGS__)
#define kn_autocast_decide(...) l9_autocast_decide(__VA_ARGS__)
#define kn_loss_scale_update(...) l9_loss_scale_update(__VA_ARGS__)
#define kn_dtype_convert(...) l9_convert(__VA_ARGS__)

#endif
