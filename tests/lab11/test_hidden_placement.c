/* test_hidden_placement.c — lab 11 hidden tests of place_matmul.c and place_split.c.
 *
 * The matmul rule is checked two ways: its answer for every pair of placements (R, P,
 * S(d), S(d,3) for every dim) at ranks 2..4 with every transpose, against the contract's
 * table written over the operands' roles (M, K, N, batch); and every answer it gives is
 * computed: the ranks' local products, combined as the answer says (summed for P, put in
 * place for S, each the whole for R), must be the whole product, with 2 and 3 ranks. The
 * parts are cut by this file's own index arithmetic (part_index), never by the student's
 * scatter, so each unit is tested alone. The split is checked on every parameter of real
 * kn_gpt models (and names that are not parameters), local shapes and scatter/gather on
 * every dim of random shapes of rank 1..4, blocks 1..3, 1..4 ranks, against part_index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../labs/lab11-parallel/tests/check.h"
#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/placement.h"

static const char *pstr(kn_placement p) {
    static char buf[4][32];
    static int next;
    char *b = buf[next++ % 4];
    if (p.kind == KN_PLACE_SHARD) snprintf(b, 32, "S(%d,%d)", p.dim, p.blocks);
    else snprintf(b, 32, "%s", p.kind == KN_PLACE_PARTIAL ? "P" : p.kind == KN_PLACE_REPLICATE ? "R" : "?");
    return b;
}

/* ---------------------------------------------------------------- roles and the table */

/* What a placement means for one operand of a matmul: its role. */
enum role { ROLE_R, ROLE_P, ROLE_ROW, ROLE_COL, ROLE_BATCH, ROLE_OTHER };

/* a's row dim is M and its column dim K (b: K and N), swapped by a transpose. */
static enum role role_of(int nd, bool t, kn_placement p) {
    if (p.kind == KN_PLACE_REPLICATE) return ROLE_R;
    if (p.kind == KN_PLACE_PARTIAL) return ROLE_P;
    if (p.blocks != 1) return ROLE_OTHER;
    if (p.dim < nd - 2) return ROLE_BATCH;
    return (p.dim == nd - 2) != t ? ROLE_ROW : ROLE_COL;
}

/* The contract over roles: a's ROW is M, COL is K; b's ROW is K, COL is N. */
static bool table(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *want) {
    enum role x = role_of(nd, ta, a), y = role_of(nd, tb, b);
    if (x == ROLE_R && y == ROLE_R) *want = kn_place_replicate();
    else if (x == ROLE_ROW && y == ROLE_R) *want = kn_place_shard(nd - 2);
    else if (x == ROLE_R && y == ROLE_COL) *want = kn_place_shard(nd - 1);
    else if (x == ROLE_COL && y == ROLE_ROW) *want = kn_place_partial();
    else if (x == ROLE_BATCH && y == ROLE_BATCH && a.dim == b.dim) *want = kn_place_shard(a.dim);
    else if ((x == ROLE_P && y == ROLE_R) || (x == ROLE_R && y == ROLE_P)) *want = kn_place_partial();
    else return false;
    return true;
}

static int placements(int nd, kn_placement *out) {
    int n = 0;
    out[n++] = kn_place_partial();
    for (int d = nd - 1; d >= 0; d--) out[n++] = kn_place_shard_blocks(d, 3), out[n++] = kn_place_shard(d);
    out[n++] = kn_place_replicate();
    return n;
}

KN_TEST(lab11_hidden_place_matmul, every_pair_every_rank_and_transpose) {
    int ok = 0;
    for (int nd = 2; nd <= 4; nd++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                kn_placement pl[12];
                int np = placements(nd, pl);
                for (int i = 0; i < np; i++)
                    for (int j = 0; j < np; j++) {
                        kn_placement want, got = {KN_PLACE_KIND_COUNT, 42, 42};
                        kn_status st = kn_place_rule_matmul(nd, ta, tb, pl[i], pl[j], &got);
                        if (table(nd, ta, tb, pl[i], pl[j], &want)) {
                            cr_assert(st == KN_OK && kn_place_equal(got, want),
                                      "rank %d ta %d tb %d: a %s x b %s: %s, %s; expected %s", nd, ta, tb, pstr(pl[i]),
                                      pstr(pl[j]), kn_status_name(st), pstr(got), pstr(want));
                            ok++;
                        } else {
                            cr_assert(st == KN_ERR_UNSUPPORTED,
                                      "rank %d ta %d tb %d: a %s x b %s: %s (%s), expected KN_ERR_UNSUPPORTED", nd, ta,
                                      tb, pstr(pl[i]), pstr(pl[j]), kn_status_name(st), pstr(got));
                            cr_assert(got.kind == KN_PLACE_KIND_COUNT && got.dim == 42 && got.blocks == 42,
                                      "rank %d: a %s x b %s: refused, but *out was written", nd, pstr(pl[i]), pstr(pl[j]));
                            cr_assert(kn_last_error()[0], "a refusal without a message");
                        }
                    }
            }
    cr_assert_eq(ok, 84, "%d supported pairs, expected 84", ok);
}

KN_TEST(lab11_hidden_place_matmul, argument_errors) {
    kn_placement r = kn_place_replicate(), out;
    for (int nd = -1; nd <= 6; nd++)
        if (nd < 2 || nd > 4) KN_ASSERT_ERR(kn_place_rule_matmul(nd, false, false, r, r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(4, false, false, r, kn_place_shard(4), &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, true, true, kn_place_shard(-2), r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, false, false, r, (kn_placement){(kn_place_kind)7, -1, 1}, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(3, false, false, r, r, NULL), KN_ERR_ARG);
}

/* ---------------------------------------------------------------- index arithmetic */

static int64_t count(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* For the element e of a whole value placed S(dim, k) over `parts` ranks: the rank that
 * holds it, and its index in that rank's part (row-major over the local shape). */
static int part_index(int nd, const int64_t *shape, int dim, int k, int parts, int64_t e, int64_t *local_e) {
    int64_t idx[8], rest = e;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % shape[d], rest /= shape[d];
    int64_t seg = shape[dim] / k, blk = seg / parts, j = idx[dim];
    int rank = (int)(j % seg / blk);
    idx[dim] = j / seg * blk + j % seg % blk;
    int64_t l = 0;
    for (int d = 0; d < nd; d++) l = l * (d == dim ? shape[d] / parts : shape[d]) + idx[d];
    *local_e = l;
    return rank;
}

/* Rank r's part of `full` as the test cuts it (P: rank 0 holds full - r-weighted noise). */
static void cut(const float *full, int nd, const int64_t *shape, kn_placement p, int parts, int r, float *local) {
    int64_t n = count(nd, shape), le;
    for (int64_t e = 0; e < n; e++) {
        if (p.kind == KN_PLACE_SHARD) {
            if (part_index(nd, shape, p.dim, p.blocks, parts, e, &le) == r) local[le] = full[e];
        } else if (p.kind == KN_PLACE_PARTIAL) {
            float noise = (float)((e * 3 + 1) % 7) - 3;
            local[e] = r == 0 ? full[e] - (parts - 1) * noise : noise;
        } else {
            local[e] = full[e];
        }
    }
}

static void local_shape_of(int nd, const int64_t *shape, kn_placement p, int parts, int64_t *ls) {
    for (int d = 0; d < nd; d++) ls[d] = shape[d];
    if (p.kind == KN_PLACE_SHARD) ls[p.dim] /= parts;
}

/* out[.., M, N] = a b with the batch dims of a (b's are the same) */
static void product(int nd, bool ta, bool tb, const int64_t *sa, const int64_t *sb, const float *a, const float *b,
                    double *out) {
    int64_t M = sa[nd - 2 + ta], K = sa[nd - 1 - ta], N = sb[nd - 1 - tb], nb = count(nd - 2, sa);
    cr_assert_eq(K, sb[nd - 2 + tb], "inner dims %lld and %lld", (long long)K, (long long)sb[nd - 2 + tb]);
    for (int64_t z = 0; z < nb; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t q = 0; q < K; q++) {
                    float x = ta ? a[(z * K + q) * M + i] : a[(z * M + i) * K + q];
                    float y = tb ? b[(z * N + j) * K + q] : b[(z * K + q) * N + j];
                    s += (double)x * y;
                }
                out[(z * M + i) * N + j] = s;
            }
}

KN_TEST(lab11_hidden_place_matmul, answers_compute_the_product) {
    int done = 0;
    for (int parts = 2; parts <= 3; parts++)
        for (int nd = 2; nd <= 4; nd++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t >> 1;
                int64_t B[2] = {parts, 2 * parts}, M = 2 * parts, K = 3 * parts, N = parts, sa[4], sb[4], so[4];
                for (int d = 0; d < nd - 2; d++) sa[d] = sb[d] = so[d] = B[d];
                sa[nd - 2] = ta ? K : M, sa[nd - 1] = ta ? M : K, sb[nd - 2] = tb ? N : K, sb[nd - 1] = tb ? K : N;
                so[nd - 2] = M, so[nd - 1] = N;
                int64_t na = count(nd, sa), nb = count(nd, sb), no = count(nd, so);
                float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb);
                float *la = malloc(sizeof(float) * na), *lb = malloc(sizeof(float) * nb);
                double *want = malloc(sizeof(double) * no), *lo = malloc(sizeof(double) * no),
                       *sum = malloc(sizeof(double) * no);
                for (int64_t i = 0; i < na; i++) a[i] = (float)((i * 5 + 2) % 9) - 4;
                for (int64_t i = 0; i < nb; i++) b[i] = (float)((i * 7 + 3) % 11) - 5;
                product(nd, ta, tb, sa, sb, a, b, want);
                kn_placement pl[12];
                int np = placements(nd, pl);
                for (int i = 0; i < np; i++)
                    for (int j = 0; j < np; j++) {
                        kn_placement po;
                        if (kn_place_rule_matmul(nd, ta, tb, pl[i], pl[j], &po) != KN_OK) continue;
                        cr_assert(po.kind != KN_PLACE_SHARD || po.blocks == 1, "a %s x b %s gave %s", pstr(pl[i]),
                                  pstr(pl[j]), pstr(po));
                        for (int64_t e = 0; e < no; e++) sum[e] = 0;
                        for (int r = 0; r < parts; r++) {
                            int64_t lsa[4], lsb[4], lso[4];
                            local_shape_of(nd, sa, pl[i], parts, lsa);
                            local_shape_of(nd, sb, pl[j], parts, lsb);
                            local_shape_of(nd, so, po, parts, lso);
                            cut(a, nd, sa, pl[i], parts, r, la);
                            cut(b, nd, sb, pl[j], parts, r, lb);
                            product(nd, ta, tb, lsa, lsb, la, lb, lo);
                            for (int64_t e = 0; e < no; e++) {
                                int64_t le = e;
                                if (po.kind == KN_PLACE_SHARD && part_index(nd, so, po.dim, 1, parts, e, &le) != r) continue;
                                if (po.kind == KN_PLACE_REPLICATE)
                                    cr_assert(lo[e] == want[e], "a %s x b %s -> R: rank %d's [%lld] = %g, expected %g",
                                              pstr(pl[i]), pstr(pl[j]), r, (long long)e, lo[e], want[e]);
                                sum[e] += lo[le];
                            }
                        }
                        for (int64_t e = 0; e < no; e++) {
                            double w = po.kind == KN_PLACE_REPLICATE ? parts * want[e] : want[e];
                            cr_assert(sum[e] == w, "%d ranks, rank %d%s%s: a %s x b %s -> %s: element %lld is %g, expected %g",
                                      parts, nd, ta ? " ta" : "", tb ? " tb" : "", pstr(pl[i]), pstr(pl[j]), pstr(po),
                                      (long long)e, sum[e], w);
                        }
                        done++;
                    }
                free(a), free(b), free(la), free(lb), free(want), free(lo), free(sum);
            }
    cr_assert_eq(done, 2 * 84);
}

/* ---------------------------------------------------------------- GPT-2's parameters */

/* The contract's placement of a parameter, from its suffix. */
static kn_placement megatron(const char *name) {
    if (strstr(name, "c_attn.weight")) return kn_place_shard_blocks(1, 3);
    if (strstr(name, "c_attn.bias")) return kn_place_shard_blocks(0, 3);
    if (strstr(name, "c_fc.weight")) return kn_place_shard(1);
    if (strstr(name, "c_fc.bias") || strstr(name, "c_proj.weight") || !strcmp(name, "wte.weight")) return kn_place_shard(0);
    return kn_place_replicate();
}

KN_TEST(lab11_hidden_place_split, every_parameter_of_real_models) {
    const kn_gpt_config cfgs[2] = {{.vocab = 12, .context = 6, .layers = 3, .width = 12, .heads = 2},
                                   {.vocab = 24, .context = 4, .layers = 13, .width = 6, .heads = 3}};
    for (int c = 0; c < 2; c++) {
        kn_gpt g;
        KN_ASSERT_OK(kn_gpt_new(&g, &cfgs[c]));
        kn_gpt_init(&g, 7);
        for (int i = 0; i < g.p.count; i++) {
            const kn_param_info *in = &g.p.info[i];
            kn_placement got = {KN_PLACE_KIND_COUNT, 42, 42}, want = megatron(in->name);
            kn_status st = kn_place_gpt_param(in->name, &got);
            cr_assert(st == KN_OK && kn_place_equal(got, want), "%s: %s %s, expected %s", in->name, kn_status_name(st),
                      pstr(got), pstr(want));
            /* both models' widths, 4D, 3D and vocabularies cut over 1, 2 and 3 ranks: the
             * parts of every parameter rebuild it */
            for (int parts = 1; parts <= 3; parts++) {
                int64_t ls[8];
                KN_ASSERT_OK(kn_place_local_shape(in->ndim, in->shape, got, parts, ls));
                float *part = malloc(sizeof(float) * (size_t)in->numel), *back = malloc(sizeof(float) * (size_t)in->numel);
                for (int64_t e = 0; e < in->numel; e++) back[e] = -1;
                for (int r = 0; r < parts; r++) {
                    KN_ASSERT_OK(kn_place_scatter(g.p.data + in->offset, in->ndim, in->shape, got, parts, r, part));
                    KN_ASSERT_OK(kn_place_gather(part, in->ndim, in->shape, got, parts, r, back));
                }
                cr_assert(!memcmp(back, g.p.data + in->offset, sizeof(float) * (size_t)in->numel),
                          "%s over %d ranks: the gathered parts are not the parameter", in->name, parts);
                free(part), free(back);
            }
        }
        kn_gpt_free(&g);
    }
}

KN_TEST(lab11_hidden_place_split, names_that_are_not_parameters) {
    const char *bad[] = {"",
                         "h",
                         "h.",
                         "h.0",
                         "h.0.",
                         "h..attn.c_attn.weight",
                         "h.a.attn.c_attn.weight",
                         "h.0a.attn.c_attn.weight",
                         "h./.attn.c_attn.weight",
                         "h.:.attn.c_attn.weight",
                         "h.1/.ln_1.weight",
                         "h.+1.mlp.c_fc.bias",
                         "h. 1.mlp.c_fc.bias",
                         "h.1.mlp.c_fc",
                         "h.1.mlp.c_fc.bias.",
                         "h.1.mlp.c_fc.biass",
                         "h.1.mlp.c_proj",
                         "h.1.attn.c_attn.weight ",
                         "h.1.attn",
                         "h.1.ln_1",
                         "h.1.ln_f.weight",
                         "hh.1.ln_1.weight",
                         "x.1.ln_1.weight",
                         ".h.1.ln_1.weight",
                         "wte",
                         "wte.bias",
                         "wte.weightx",
                         "wpe.weight.",
                         "ln_f",
                         "ln_f.weights",
                         "h.1.wte.weight",
                         "1.ln_1.weight",
                         "lm_head.weight"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_placement out = {KN_PLACE_KIND_COUNT, 42, 42};
        kn_clear_error();
        kn_status st = kn_place_gpt_param(bad[i], &out);
        cr_assert(st == KN_ERR_ARG, "'%s': %s (%s), expected KN_ERR_ARG", bad[i], kn_status_name(st), pstr(out));
        cr_assert(kn_last_error()[0], "'%s': no message", bad[i]);
    }
    const char *good[] = {"h.007.ln_2.bias", "h.123456.attn.c_proj.weight", "h.9.mlp.c_proj.bias"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kn_placement out;
        KN_ASSERT_OK(kn_place_gpt_param(good[i], &out));
        cr_assert(kn_place_equal(out, megatron(good[i])), "%s: %s", good[i], pstr(out));
    }
    kn_placement out;
    KN_ASSERT_ERR(kn_place_gpt_param(NULL, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gpt_param("wte.weight", NULL), KN_ERR_ARG);
}

/* ---------------------------------------------------------------- parts of any shape */

/* A small deterministic generator (the test's own: the same shapes on every machine). */
static uint32_t next_u32(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

KN_TEST(lab11_hidden_place_split, local_shapes_exhaustive) {
    uint64_t seed = 11;
    for (int it = 0; it < 400; it++) {
        int nd = 1 + (int)(next_u32(&seed) % 4), k = 1 + (int)(next_u32(&seed) % 3), parts = 1 + (int)(next_u32(&seed) % 4);
        int dim = (int)(next_u32(&seed) % nd);
        int64_t s[4], ls[5] = {-1, -1, -1, -1, -1};
        for (int d = 0; d < nd; d++) s[d] = 1 + next_u32(&seed) % 13;
        if (it % 2) s[dim] = (int64_t)k * parts * (1 + next_u32(&seed) % 3);
        kn_placement p = kn_place_shard_blocks(dim, k);
        kn_status st = kn_place_local_shape(nd, s, p, parts, ls);
        if (s[dim] % (k * parts)) {
            cr_assert(st == KN_ERR_SHAPE, "shape dim %d of %lld, S(%d,%d) over %d: %s, expected KN_ERR_SHAPE", dim,
                      (long long)s[dim], dim, k, parts, kn_status_name(st));
            continue;
        }
        cr_assert(st == KN_OK, "%s", kn_last_error());
        for (int d = 0; d < nd; d++)
            cr_assert_eq(ls[d], d == dim ? s[d] / parts : s[d], "S(%d,%d) over %d: local dim %d = %lld", dim, k, parts,
                         d, (long long)ls[d]);
        cr_assert_eq(ls[nd], -1, "local[%d] written past the value's %d dims", nd, nd);
        for (int q = 0; q < 2; q++) {
            kn_placement whole = q ? kn_place_partial() : kn_place_replicate();
            KN_ASSERT_OK(kn_place_local_shape(nd, s, whole, parts, ls));
            for (int d = 0; d < nd; d++) cr_assert_eq(ls[d], s[d], "%s changed dim %d", pstr(whole), d);
        }
    }
    int64_t s[2] = {4, 6}, ls[2];
    KN_ASSERT_ERR(kn_place_local_shape(2, s, kn_place_shard(2), 2, ls), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_local_shape(2, s, kn_place_shard(-1), 2, ls), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_local_shape(2, s, kn_place_shard(0), 0, ls), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_local_shape(2, s, kn_place_shard_blocks(0, 0), 2, ls), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_local_shape(2, s, kn_place_shard(1), 4, ls), KN_ERR_SHAPE);
    KN_ASSERT_OK(kn_place_local_shape(2, s, kn_place_shard(1), 6, ls));
    cr_assert(ls[0] == 4 && ls[1] == 1);
}

KN_TEST(lab11_hidden_place_split, scatter_and_gather_match_the_index_arithmetic) {
    uint64_t seed = 5;
    int cases = 0;
    while (cases < 300) {
        int nd = 1 + (int)(next_u32(&seed) % 4), k = 1 + (int)(next_u32(&seed) % 3), parts = 1 + (int)(next_u32(&seed) % 4);
        int dim = (int)(next_u32(&seed) % nd);
        int64_t s[4];
        for (int d = 0; d < nd; d++) s[d] = 1 + next_u32(&seed) % 5; /* odd sizes too */
        s[dim] = (int64_t)k * parts * (1 + next_u32(&seed) % 3);
        int64_t n = count(nd, s), nl = n / parts;
        float *full = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
        float *part = malloc(sizeof(float) * (nl + 2)), *want = malloc(sizeof(float) * nl);
        for (int64_t e = 0; e < n; e++) full[e] = (float)e + 0.5f;
        kn_placement p = kn_place_shard_blocks(dim, k);
        for (int r = 0; r < parts; r++) {
            cut(full, nd, s, p, parts, r, want);
            for (int64_t e = 0; e < nl + 2; e++) part[e] = -9;
            KN_ASSERT_OK(kn_place_scatter(full, nd, s, p, parts, r, part));
            for (int64_t e = 0; e < nl; e++)
                cr_assert(part[e] == want[e], "shape rank %d dim %d S(%d,%d) over %d, rank %d: part[%lld] = %g, expected %g",
                          nd, dim, dim, k, parts, r, (long long)e, part[e], want[e]);
            cr_assert(part[nl] == -9 && part[nl + 1] == -9, "scatter wrote past the part's end");
            /* gather: only this rank's elements change */
            for (int64_t e = 0; e < n; e++) back[e] = -1;
            KN_ASSERT_OK(kn_place_gather(part, nd, s, p, parts, r, back));
            for (int64_t e = 0; e < n; e++) {
                int64_t le;
                bool mine = part_index(nd, s, dim, k, parts, e, &le) == r;
                cr_assert(back[e] == (mine ? full[e] : -1), "gather S(%d,%d) over %d, rank %d: [%lld] = %g, expected %g",
                          dim, k, parts, r, (long long)e, back[e], mine ? full[e] : -1);
            }
        }
        free(full), free(back), free(part), free(want);
        cases++;
    }
}

KN_TEST(lab11_hidden_place_split, replicate_and_errors) {
    int64_t s[3] = {3, 2, 5};
    float full[30], part[32], back[30];
    for (int i = 0; i < 30; i++) full[i] = (float)(i * i);
    for (int r = 0; r < 3; r++) {
        memset(part, 0, sizeof part);
        memset(back, 0, sizeof back);
        KN_ASSERT_OK(kn_place_scatter(full, 3, s, kn_place_replicate(), 3, r, part));
        KN_ASSERT_OK(kn_place_gather(part, 3, s, kn_place_replicate(), 3, r, back));
        cr_assert(!memcmp(part, full, sizeof full) && !memcmp(back, full, sizeof full), "R over 3, rank %d", r);
        KN_OUT(part); /* all 32: what lies past the value too */
        cr_assert(part[30] == 0 && part[31] == 0, "R wrote past the value");
    }
    /* a scalar and a one-element value, replicated: one float each */
    float one[2] = {3.5f, -9}, got[2] = {0, -9};
    int64_t s1[1] = {1};
    KN_ASSERT_OK(kn_place_scatter(one, 0, NULL, kn_place_replicate(), 2, 1, got));
    cr_assert(got[0] == 3.5f && got[1] == -9, "a replicated scalar: %g %g", got[0], got[1]);
    got[0] = 0;
    KN_ASSERT_OK(kn_place_gather(one, 1, s1, kn_place_replicate(), 4, 3, got));
    cr_assert(got[0] == 3.5f && got[1] == -9, "a replicated [1]: %g %g", got[0], got[1]);
    /* a zero-size value: nothing to copy */
    int64_t z[2] = {0, 4};
    KN_ASSERT_OK(kn_place_scatter(full, 2, z, kn_place_shard(1), 2, 1, part));
    KN_ASSERT_OK(kn_place_gather(part, 2, z, kn_place_shard(1), 2, 1, back));
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(2), 2, 0, part), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_place_gather(part, 3, s, kn_place_shard_blocks(0, 3), 2, 0, back), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(1), 2, 2, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gather(part, 3, s, kn_place_shard(1), 2, -1, back), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_partial(), 2, 0, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gather(part, 3, s, kn_place_partial(), 2, 0, back), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(3), 2, 0, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(NULL, 3, s, kn_place_shard(1), 2, 0, part), KN_ERR_ARG);
}
