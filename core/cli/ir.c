/* ir.c — `kiln ir FILE [--print|--verify|--run] [--seed N]`: work with IR text files.
 *
 *   --verify (default)  parse and verify; print the node count and the cost (flops, bytes)
 *   --print             print the canonical text (what kn_graph_print writes)
 *   --run               run it on the CPU interpreter with every input and param filled
 *                       from a Philox stream of --seed (default 0), and print the outputs
 *
 * Float inputs get N(0, 1) values; integer inputs get values in [0, k), with k the
 * smallest range their uses allow (rows of an embedding table, classes of a
 * cross-entropy), 2 otherwise; bool inputs get 0/1. FILE "-" reads standard input.
 * Exit status: 0 ok, 1 the file is bad or does not run, 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/ir.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kiln ir FILE [--print|--verify|--run] [--seed N]\n"
               "  --verify   parse and verify (default); print nodes and cost\n"
               "  --print    print the canonical text\n"
               "  --run      run with inputs from a seeded RNG and print the outputs\n");
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = kn_malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char *nb = kn_realloc(buf, cap * 2);
        if (!nb) { kn_free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    if (f != stdin) fclose(f);
    *len = n;
    return buf;
}

/* The range integer input `id` may take: the smallest bound over its uses. */
static int64_t index_range(const kn_graph *g, int32_t id) {
    int64_t k = INT64_MAX;
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int a = 0; a < n->nin; a++) {
            if (n->in[a] != id) continue;
            int64_t r = INT64_MAX;
            if (n->op == KN_OP_EMBEDDING && a == 1) r = g->nodes[n->in[0]].type.shape[0];
            if (n->op == KN_OP_EMBEDDING_GRAD && a == 1) r = n->attrs.shape[0];
            if (n->op == KN_OP_CROSS_ENTROPY && a == 1) { const kn_type *t = &g->nodes[n->in[0]].type; r = t->shape[t->ndim - 1]; }
            if (n->op == KN_OP_CROSS_ENTROPY_BWD && a == 2) { const kn_type *t = &g->nodes[n->in[1]].type; r = t->shape[t->ndim - 1]; }
            if (r < k) k = r;
        }
    }
    return k == INT64_MAX ? 2 : k;
}

static kn_status fill_input(const kn_graph *g, int32_t id, kn_rng *rng, kn_tensor **out) {
    const kn_type *t = &g->nodes[id].type;
    if (kn_dtype_is_float(t->dtype)) return kn_tensor_randn(out, t->dtype, t->ndim, t->shape, rng);
    KN_TRY(kn_tensor_zeros(out, t->dtype, t->ndim, t->shape));
    int64_t k = t->dtype == KN_DT_BOOL ? 2 : index_range(g, id), n = kn_tensor_numel(*out);
    for (int64_t i = 0; i < n; i++)
        kn_dtype_store(t->dtype, kn_tensor_data(*out), i, k > 0 ? (double)(kn_rng_u32(rng) % (uint32_t)(k < 0xffffffff ? k : 0xffffffff)) : 0);
    return KN_OK;
}

static int run_graph(const kn_graph *g, uint64_t seed) {
    kn_interp *it = NULL;
    if (kn_interp_new(&it, g) != KN_OK) { fprintf(stderr, "kiln ir: %s\n", kn_last_error()); return 1; }
    kn_rng rng = kn_rng_new(seed);
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op != KN_OP_INPUT && g->nodes[i].op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        kn_status st = fill_input(g, i, &rng, &t);
        if (st == KN_OK) st = kn_interp_bind(it, g->nodes[i].attrs.name, t);
        kn_tensor_free(t);
        if (st != KN_OK) { fprintf(stderr, "kiln ir: %s\n", kn_last_error()); kn_interp_free(it); return 1; }
    }
    if (kn_interp_run(it) != KN_OK) { fprintf(stderr, "kiln ir: %s\n", kn_last_error()); kn_interp_free(it); return 1; }
    for (int i = 0; i < g->noutputs; i++) {
        char tb[160];
        printf("output %d (%%%d): %s\n", i, g->outputs[i], kn_type_str(&g->nodes[g->outputs[i]].type, tb, sizeof tb));
        kn_tensor_print(stdout, kn_interp_output(it, i), 6);
        printf("\n");
    }
    kn_interp_free(it);
    return 0;
}

int kn_cli_ir(int argc, char **argv) {
    const char *path = NULL, *mode = "--verify";
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--print") || !strcmp(argv[i], "--verify") || !strcmp(argv[i], "--run")) mode = argv[i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            char *end;
            seed = strtoull(argv[++i], &end, 10);
            if (*end) { fprintf(stderr, "kiln ir: --seed wants a non-negative integer, got '%s'\n", argv[i]); return 2; }
        } else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "kiln ir: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
        else if (!path) path = argv[i];
        else { fprintf(stderr, "kiln ir: one file at a time ('%s' and '%s')\n", path, argv[i]); return 2; }
    }
    if (!path) { usage(stderr); return 2; }
    size_t len;
    char *text = read_all(path, &len);
    if (!text) { fprintf(stderr, "kiln ir: cannot read '%s'\n", path); return 1; }
    kn_graph *g = NULL;
    kn_status st = kn_graph_parse(text, len, &g);
    kn_free(text);
    if (st != KN_OK) { fprintf(stderr, "kiln ir: %s: %s\n", path, kn_last_error()); return 1; }
    int rc = 0;
    if (kn_graph_verify(g) != KN_OK) {
        fprintf(stderr, "kiln ir: %s: %s\n", path, kn_last_error());
        if (!strcmp(mode, "--print")) kn_graph_print(stdout, g);
        rc = 1;
    } else if (!strcmp(mode, "--print")) {
        rc = kn_graph_print(stdout, g) == KN_OK ? 0 : 1;
    } else if (!strcmp(mode, "--verify")) {
        kn_cost c = kn_graph_cost(g);
        printf("%s: ok: %d nodes, %d outputs, %.4g flops, %.4g bytes\n", path, g->nnodes, g->noutputs, c.flops, c.bytes);
    } else {
        rc = run_graph(g, seed);
    }
    kn_graph_free(g);
    return rc;
}
