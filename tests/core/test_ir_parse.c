/* test_ir_parse.c — the text format: good files round-trip exactly, every malformed file
 * of the corpus gives its own specific error, and random damage never crashes.
 *
 * Corpus: tests/ir/bad/NAME.ir, whose first line is "# expect: SUBSTRING"; parsing and
 * then verifying the file must fail with a message containing SUBSTRING. Good files
 * (tests/ir/good/) are canonical text: parse + verify + print gives the file back. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_ir_util.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s (tests run from the repository root)", path);
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Parse then verify; the status of the first failure. */
static kn_status parse_verify(const char *text, size_t len) {
    kn_graph *g = NULL;
    kn_status st = kn_graph_parse(text, len, &g);
    if (st == KN_OK) st = kn_graph_verify(g);
    kn_graph_free(g);
    return st;
}

static int list_dir(const char *dir, char names[][256], int max) {
    DIR *d = opendir(dir);
    cr_assert(d, "cannot open %s (tests run from the repository root)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        size_t l = strlen(e->d_name);
        if (l > 3 && !strcmp(e->d_name + l - 3, ".ir")) snprintf(names[n++], 256, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

KN_TEST(ir_parse, every_bad_file_gives_its_error) {
    static char names[200][256];
    int n = list_dir("tests/ir/bad", names, 200);
    cr_assert(n >= 30, "only %d malformed files", n);
    for (int i = 0; i < n; i++) {
        size_t len;
        char *text = slurp(names[i], &len);
        const char *tag = "# expect: ";
        cr_assert(!strncmp(text, tag, strlen(tag)), "%s: first line must be '# expect: ...'", names[i]);
        char want[300];
        const char *s = text + strlen(tag), *nl = strchr(s, '\n');
        snprintf(want, sizeof want, "%.*s", (int)(nl ? nl - s : (long)strlen(s)), s);
        kn_clear_error();
        kn_status st = parse_verify(text, len);
        cr_assert(st != KN_OK, "%s: accepted, expected an error containing \"%s\"", names[i], want);
        cr_assert(strstr(kn_last_error(), want) != NULL, "%s: error \"%s\" does not contain \"%s\"", names[i],
                  kn_last_error(), want);
        free(text);
    }
}

KN_TEST(ir_parse, good_files_round_trip_exactly_and_run) {
    static char names[50][256];
    int n = list_dir("tests/ir/good", names, 50);
    bool seen[KN_OP_COUNT] = {false};
    cr_assert(n >= 3);
    for (int i = 0; i < n; i++) {
        size_t len;
        char *text = slurp(names[i], &len), *out = NULL;
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_graph_parse(text, len, &g));
        KN_ASSERT_OK(kn_graph_verify(g));
        KN_ASSERT_OK(kn_graph_to_string(g, &out));
        cr_assert_str_eq(out, text, "%s is not canonical", names[i]);
        for (int32_t k = 0; k < g->nnodes; k++) seen[g->nodes[k].op] = true;
        /* it runs, with every input filled */
        kn_interp *it = NULL;
        KN_ASSERT_OK(kn_interp_new(&it, g));
        kn_collectives coll; /* collectives.ir talks to the other ranks: here, none */
        kn_collectives_local *local = NULL;
        KN_ASSERT_OK(kn_collectives_local_new(&local, &coll));
        static const float params[16] = {1, 2, 3, 4, 5, 6}; /* what its all_gather gathers */
        KN_ASSERT_OK(kn_collectives_local_params(local, params, 16));
        kn_interp_set_collectives(it, &coll);
        for (int32_t k = 0; k < g->nnodes; k++) {
            const kn_node *nd = &g->nodes[k];
            if (nd->op != KN_OP_INPUT && nd->op != KN_OP_PARAM) continue;
            kn_tensor *t = NULL, *c = NULL;
            if (kn_dtype_is_float(nd->type.dtype)) {
                t = irt_randn(nd->type.dtype, nd->type.ndim, nd->type.shape, (uint64_t)k);
            } else { /* indices below 3 fit every table and class count of the good files */
                c = irt_randint(nd->type.ndim, nd->type.shape, 3, (uint64_t)k);
                KN_ASSERT_OK(kn_tensor_cast(&t, c, nd->type.dtype));
            }
            KN_ASSERT_OK(kn_interp_bind(it, nd->attrs.name, t));
            kn_tensor_free(t);
            kn_tensor_free(c);
        }
        KN_ASSERT_OK(kn_interp_run(it));
        double v;
        KN_ASSERT_OK(kn_tensor_item(kn_interp_output(it, 0), &v));
        cr_assert(isfinite(v), "%s: output %g", names[i], v);
        kn_interp_free(it);
        kn_collectives_local_free(local);
        kn_graph_free(g);
        kn_free(out);
        free(text);
    }
    for (int op = 0; op < KN_OP_COUNT; op++)
        cr_assert(seen[op], "no good IR file uses op %s: its text form is not round-tripped", kn_op_name((kn_op)op));
}

KN_TEST(ir_parse, names_comments_and_blank_lines) {
    const char *t = "# a comment\n\n  %x = input {name=\"x\"} : f32[2]   # trailing\n"
                    "%y_1 = exp %x : f32[2]\r\n%z = add %y_1,%x:f32[2]\noutput %z\n";
    kn_graph *g = NULL;
    char *out = NULL;
    KN_ASSERT_OK(kn_graph_parse(t, strlen(t), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    KN_ASSERT_OK(kn_graph_to_string(g, &out));
    cr_assert_str_eq(out, "%0 = input {name=\"x\"} : f32[2]\n%1 = exp %0 : f32[2]\n%2 = add %1, %0 : f32[2]\noutput %2\n");
    kn_free(out);
    kn_graph_free(g);
    /* empty text is an empty graph; the parser does not need a NUL */
    KN_ASSERT_OK(kn_graph_parse("", 0, &g));
    cr_assert_eq(g->nnodes, 0);
    kn_graph_free(g);
    KN_ASSERT_OK(kn_graph_parse("%0 = input {name=\"x\"} : f32[2]XXXX", 30, &g));
    cr_assert_eq(g->nnodes, 1);
    kn_graph_free(g);
}

/* Truncations and random byte damage of a valid text: either parse + verify succeed or
 * they fail with a message; nothing crashes, nothing leaks (ASan build). */
KN_TEST(ir_parse, damaged_text_never_crashes) {
    size_t len;
    char *text = slurp("tests/ir/good/attention.ir", &len);
    char *buf = malloc(len + 1);
    for (size_t cut = 0; cut <= len; cut++) {
        memcpy(buf, text, cut);
        kn_status st = parse_verify(buf, cut);
        cr_assert(st == KN_OK || kn_last_error()[0], "cut at %zu: no message", cut);
    }
    kn_rng r = kn_rng_new(99);
    const char alphabet[] = "%=:{}[],\"-#\n 0123456789abcxyzfinput";
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(buf, text, len);
        int edits = 1 + (int)(kn_rng_u32(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = kn_rng_u32(&r) % len;
            uint32_t w = kn_rng_u32(&r);
            buf[at] = (w & 1) ? (char)(w >> 8) : alphabet[(w >> 8) % (sizeof alphabet - 1)];
        }
        kn_clear_error();
        kn_status st = parse_verify(buf, len);
        cr_assert(st == KN_OK || kn_last_error()[0], "trial %d: failed without a message", trial);
    }
    free(buf);
    free(text);
}

/* The example of the format in kiln/ir.h's overview is canonical text of a valid graph. */
KN_TEST(ir_parse, the_header_example_is_canonical) {
    size_t len;
    char *h = slurp("core/include/kiln/ir.h", &len), text[1024] = "", *out = NULL;
    const char *p = strstr(h, " *     %0 = input");
    cr_assert(p, "the example is gone from kiln/ir.h");
    while (!strncmp(p, " *     ", 7)) { /* collect the example's lines */
        const char *nl = strchr(p, '\n');
        strncat(text, p + 7, (size_t)(nl - p - 7) + 1);
        p = nl + 1;
    }
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    KN_ASSERT_OK(kn_graph_to_string(g, &out));
    cr_assert_str_eq(out, text);
    kn_free(out);
    kn_graph_free(g);
    free(h);
}

/* Make the 1st, 2nd, ... allocation of parse + verify + autograd + interpretation fail:
 * every failure must come back as an error with a message, never a crash or a leak. */
KN_TEST(ir_parse, allocation_failures_fail_cleanly) {
    size_t len;
    char *text = slurp("tests/ir/good/mlp.ir", &len);
    int64_t xs[2] = {4, 8}, ts = 4, w1s[2] = {8, 16}, b1s = 16, w2s[2] = {16, 5};
    kn_tensor *x = irt_randn(KN_DT_F32, 2, xs, 1), *t = irt_randint(1, &ts, 5, 2), *w1 = irt_randn(KN_DT_F32, 2, w1s, 3);
    kn_tensor *b1 = irt_randn(KN_DT_F32, 1, &b1s, 4), *w2 = irt_randn(KN_DT_F32, 2, w2s, 5);
    bool completed = false;
    for (long n = 0; n < 100000 && !completed; n += 1 + n / 8) {
        kn_graph *g = NULL, *joint = NULL;
        kn_interp *it = NULL;
        kn_clear_error();
        kn_alloc_fail_after(n);
        kn_status st = kn_graph_parse(text, len, &g);
        kn_val wrt[3] = {{2}, {3}, {4}};
        if (st == KN_OK) st = kn_autograd(g, (kn_val){10}, 3, wrt, &joint, NULL);
        if (st == KN_OK) st = kn_interp_new(&it, joint);
        if (st == KN_OK) st = kn_interp_bind(it, "x", x);
        if (st == KN_OK) st = kn_interp_bind(it, "t", t);
        if (st == KN_OK) st = kn_interp_bind(it, "w1", w1);
        if (st == KN_OK) st = kn_interp_bind(it, "b1", b1);
        if (st == KN_OK) st = kn_interp_bind(it, "w2", w2);
        if (st == KN_OK) st = kn_interp_run(it);
        kn_alloc_fail_after(-1);
        if (st == KN_OK) completed = true;
        else cr_assert(kn_last_error()[0] != '\0', "allocation %ld failed without a message (%s)", n, kn_status_name(st));
        kn_interp_free(it);
        kn_graph_free(joint);
        kn_graph_free(g);
    }
    cr_assert(completed, "never completed");
    kn_tensor_free(x); kn_tensor_free(t); kn_tensor_free(w1); kn_tensor_free(b1); kn_tensor_free(w2);
    free(text);
}
