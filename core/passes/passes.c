/* passes.c — the pass table and the pass manager.
 *
 * One table: a name, a function and a line of help per pass, in the order "all" runs
 * them. kn_passes_run parses a comma list against the table (every name is checked
 * before any pass runs), then runs each pass on the graph in place, timing it, counting
 * nodes before and after, and, when verification is on, running the verifier after it so
 * that a pass that breaks the graph is named together with the node it broke.
 *
 * "all" is the passes that take no argument (remat needs its policy, and changes memory
 * and time, not the graph's meaning; autocast needs its dtype, and changes precision: each
 * is asked for by name) and are exact (flash changes the rounding: by_name).
 *
 * Why this order for "all": folding first turns constant subgraphs into `full` nodes,
 * which the view and algebra rules then see as the constants they look for
 * (broadcast_to(full) -> full, x*1 -> x); those rules leave the nodes they bypass dead
 * and may expose identical nodes; cse merges those, and dce sweeps up last. */
#include <string.h>
#include <time.h>

#include "kiln/passes.h"
#include "kiln/quant.h"
#include "kiln/remat.h"

static const kn_pass kn_pass_table[] = {
    {"fold", kn_pass_fold, "constant folding: an op of `full` constants that gives one value becomes a full", NULL, false},
    {"views", kn_pass_views, "canonical view chains: merge reshape/permute/broadcast chains, drop views that do nothing", NULL, false},
    {"algebra", kn_pass_algebra, "algebraic identities: x*1, x+0, x-0, x/1, neg(neg x), exact cast chains", NULL, false},
    {"cse", kn_pass_cse, "common-subexpression elimination: one node per (op, operands, attributes, type)", NULL, false},
    {"dce", kn_pass_dce, "dead-code elimination: drop nodes no output depends on (inputs and params stay)", NULL, false},
    {"remat", kn_pass_remat, "activation checkpointing, remat:POLICY (none, selective, full, every:K, mincut): "
     "recompute forward values in the backward instead of keeping them", kn_remat_check_arg, false},
    {"autocast", kn_pass_autocast, "mixed precision, autocast:bf16 or autocast:fp16: matmuls in the low dtype, "
     "reductions, norms, softmax and the loss in f32, elementwise ops follow their operands", kn_autocast_check_arg, true},
    {"lowparams", kn_pass_lowparams, "after autocast, lowparams:bf16 or lowparams:fp16: the weights' low copies "
     "(casts of params and of their views) become params NAME@bf16 that the optimizer writes", kn_lowparams_check_arg,
     true},
    {"lowloss", kn_pass_lowloss, "after autocast: the loss reads the 16-bit logits and its backward writes the 16-bit "
     "gradient (no f32 copy of the logits; the same values, bit for bit on the CPU)", NULL, true},
    {"lowsave", kn_pass_lowsave, "after autocast and lowloss, before remat: an f32 value made from a 16-bit one "
     "that the backward reads only pointwise (the MLP's pre-activation, for gelu_bwd) is kept for the backward as a "
     "16-bit copy (as PyTorch's autocast saves it; changes the gradients' rounding)", NULL, true},
    {"flash", kn_pass_flash, "flash attention: matmul_t -> causal_softmax -> matmul and its backward become "
     "flash_attn and flash_attn_bwd, no [.., T, T] value stored (equal to rounding: not in all)", NULL, true},
    {"epilogue", kn_pass_epilogue, "matmul epilogues: matmul + bias [+ gelu], matmul + gelu's unary_grad, and a weight's "
     "gradient + its bias's (a column sum) become one library call each (cuBLASLt's epilogues on a GPU; equal to "
     "rounding there: not in all; run after autocast)", NULL, true},
    {"hfuse", kn_pass_hfuse, "horizontal fusion: sibling products of column slices of one weight (q, k, v) become one "
     "wide product, in the forward, the input gradient (a concat of the gradients) and the weight gradient; sums of "
     "slice_grads become concats (equal to rounding: not in all; run after autocast, before epilogue and remat)", NULL,
     true},
    {"ddp", kn_pass_ddp, "data parallelism, ddp:MB (bucket size, default 25): each gradient stored into the slab as it "
     "is made, a bucket's all_reduce_start after its last store, its comm_wait at the end (not in all)", kn_ddp_check_arg, true},
    {"zero", kn_pass_zero, "ZeRO-1/2, zero:MB: as ddp, each bucket reduce-scattered over the ranks' shards "
     "(reduce_scatter_start) instead of all-reduced (not in all)", kn_ddp_check_arg, true},
    {"zero3", kn_pass_zero3, "ZeRO-3/FSDP, zero3:MB: as zero, and each bucket of parameters all-gathered before its "
     "first reader in the forward and again in the backward, the next one prefetched, freed after its last reader "
     "(not in all)", kn_ddp_check_arg, true},
    {"quantize", kn_pass_quantize, "INT8 post-training quantization, quantize:w8, quantize:w8a8 or quantize:w8a8-tensor: products of a 2-D "
     "weight parameter use it quantized per output channel (w8a8: and the activations per token, -tensor: per tensor; int32 sums; not in "
     "all; kiln/quant.h); w8a8-static[:minmax|percentile[:P]|mse] and w8a8-smooth[:ALPHA] need calibration data (kiln eval)", kn_quantize_check_arg, true},
};
#define KN_NPASSES ((int)(sizeof kn_pass_table / sizeof kn_pass_table[0]))

#ifdef NDEBUG
static bool kn_passes_verify = false;
#else
static bool kn_passes_verify = true;
#endif

bool kn_passes_set_verify(bool on) {
    bool old = kn_passes_verify;
    kn_passes_verify = on;
    return old;
}

const kn_pass *kn_passes_table(int *n) {
    if (n) *n = KN_NPASSES;
    return kn_pass_table;
}

const kn_pass *kn_pass_find(const char *name) {
    for (int i = 0; name && i < KN_NPASSES; i++)
        if (!strcmp(kn_pass_table[i].name, name)) return &kn_pass_table[i];
    return NULL;
}

const char *kn_passes_names(void) {
    static char names[256];
    if (!names[0]) {
        size_t len = 0;
        for (int i = 0; i < KN_NPASSES; i++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", kn_pass_table[i].name);
    }
    return names;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Split list into passes and their arguments (args[i]: "" when none); fails on an
 * unknown name, an argument the pass refuses, or too many. */
static kn_status parse_list(const kn_pass *table, int ntable, const char *list, const kn_pass **out,
                            char (*args)[KN_PASS_ARG_MAX], int *n) {
    *n = 0;
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t len = (size_t)(e - p);
        while (len && p[len - 1] == ' ') len--;
        char name[64];
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, p, len);
        name[len] = '\0';
        p = e;
        char *arg = strchr(name, ':'); /* "remat:every:2": the first colon ends the name */
        if (arg) *arg++ = '\0';
        if (!strcmp(name, "none") && !arg) continue;
        int first = -1, count = 1;
        for (int i = 0; i < ntable && first < 0; i++)
            if (!strcmp(table[i].name, name)) first = i;
        if (!strcmp(name, "all")) first = 0, count = ntable;
        if (first < 0) {
            char known[512];
            size_t len = 0;
            known[0] = '\0';
            for (int i = 0; i < ntable && len < sizeof known; i++)
                len += (size_t)snprintf(known + len, sizeof known - len, "%s, ", table[i].name);
            return kn_error(KN_ERR_ARG, "kn_passes_run: unknown pass '%s' (known: %sall, none)", name, known);
        }
        if (count == 1 && !table[first].check_arg && arg)
            return kn_error(KN_ERR_ARG, "kn_passes_run: pass %s takes no argument (got '%s:%s')", name, name, arg);
        if (count > 1 && arg) return kn_error(KN_ERR_ARG, "kn_passes_run: 'all' takes no argument (got 'all:%s')", arg);
        if (count == 1 && table[first].check_arg) {
            if (arg && strlen(arg) >= KN_PASS_ARG_MAX)
                return kn_error(KN_ERR_ARG, "kn_passes_run: the argument of %s is longer than %d characters", name,
                                KN_PASS_ARG_MAX - 1);
            kn_status st = table[first].check_arg(arg);
            if (st != KN_OK) {
                char msg[400];
                snprintf(msg, sizeof msg, "%s", kn_last_error());
                return kn_error(st, "kn_passes_run: %s", msg);
            }
        }
        for (int i = first; i < first + count; i++) {
            if (count > 1 && (table[i].check_arg || table[i].by_name)) continue; /* "all": exact, argument-free */
            if (*n == KN_PASSES_MAX)
                return kn_error(KN_ERR_ARG, "kn_passes_run: more than %d passes in \"%s\"", KN_PASSES_MAX, list);
            snprintf(args[*n], KN_PASS_ARG_MAX, "%s", arg && count == 1 ? arg : "");
            out[(*n)++] = &table[i];
        }
    }
    return KN_OK;
}

kn_status kn_passes_check(const char *list, int *n) {
    const kn_pass *todo[KN_PASSES_MAX];
    char args[KN_PASSES_MAX][KN_PASS_ARG_MAX];
    int k = 0;
    KN_TRY(parse_list(kn_pass_table, KN_NPASSES, list, todo, args, &k));
    if (n) *n = k;
    return KN_OK;
}

/* The verifier's message, prefixed with where it failed. */
static kn_status verify_after(const kn_graph *g, const char *pass) {
    kn_status st = kn_graph_verify(g);
    if (st == KN_OK) return KN_OK;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kn_last_error());
    if (!pass) return kn_error(st, "kn_passes_run: the graph does not verify before the passes: %s", msg);
    return kn_error(st, "kn_passes_run: after pass %s: %s", pass, msg);
}

kn_status kn_passes_run(kn_graph *g, const char *list, kn_pass_report *rep) {
    return kn_passes_run_with_on(kn_pass_table, KN_NPASSES, g, list, NULL, rep);
}

kn_status kn_passes_run_on(kn_graph *g, const char *list, const kn_pass_target *target, kn_pass_report *rep) {
    return kn_passes_run_with_on(kn_pass_table, KN_NPASSES, g, list, target, rep);
}

kn_status kn_passes_run_with(const kn_pass *table, int ntable, kn_graph *g, const char *list, kn_pass_report *rep) {
    return kn_passes_run_with_on(table, ntable, g, list, NULL, rep);
}

kn_status kn_passes_run_with_on(const kn_pass *table, int ntable, kn_graph *g, const char *list,
                                const kn_pass_target *target, kn_pass_report *rep) {
    kn_pass_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!g || !table || ntable < 0) return kn_error(KN_ERR_ARG, "kn_passes_run: NULL graph or table");
    const kn_pass *todo[KN_PASSES_MAX];
    char args[KN_PASSES_MAX][KN_PASS_ARG_MAX];
    int n;
    KN_TRY(parse_list(table, ntable, list, todo, args, &n));
    rep->verified = kn_passes_verify;
    rep->nodes_before = rep->nodes_after = g->nnodes;
    if (kn_passes_verify) KN_TRY(verify_after(g, NULL));
    double t_all = now_ms();
    for (int i = 0; i < n; i++) {
        kn_pass_stats *st = &rep->pass[i];
        rep->name[i] = todo[i]->name;
        rep->npasses = i + 1;
        memcpy(st->arg, args[i], sizeof st->arg);
        st->target = target;
        st->nodes_before = g->nnodes;
        double t0 = now_ms();
        kn_status s = todo[i]->run(g, st);
        st->ms = now_ms() - t0;
        st->nodes_after = rep->nodes_after = g->nnodes;
        if (s != KN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            rep->ms = now_ms() - t_all;
            return kn_error(s, "kn_passes_run: pass %s failed: %s", todo[i]->name, msg);
        }
        if (kn_passes_verify) KN_TRY(verify_after(g, todo[i]->name));
    }
    rep->ms = now_ms() - t_all;
    return KN_OK;
}

/* The two rewrite passes: their rules are lab 04 units. */
static kn_status run_rules(kn_graph *g, kn_pass_stats *st, kn_status (*rules_of)(const kn_rule **, int *),
                           const char *who) {
    if (!g) return kn_error(KN_ERR_ARG, "%s: NULL graph", who);
    const kn_rule *rules = NULL;
    int n = 0;
    KN_TRY(rules_of(&rules, &n));
    return kn_rewrite(g, rules, n, st);
}

kn_status kn_pass_algebra(kn_graph *g, kn_pass_stats *st) {
    return run_rules(g, st, kn_algebra_rules, "kn_pass_algebra");
}

kn_status kn_pass_views(kn_graph *g, kn_pass_stats *st) { return run_rules(g, st, kn_view_rules, "kn_pass_views"); }
