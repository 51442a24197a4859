/* infer_cli.c — option parsing and checkpoint loading for `kiln generate` and `kiln
 * bench-infer` (contracts in infer_cli.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/infer_cli.h"

static int set_value(const char *cmd, const kn_cli_opt *o, const char *v) {
    char *end;
    errno = 0;
    if (o->kind == O_STR) {
        if (strlen(v) >= o->n) { fprintf(stderr, "kiln %s: %s: the value is too long\n", cmd, o->name); return 2; }
        snprintf((char *)o->dst, o->n, "%s", v);
        return 0;
    }
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < o->lo || x > o->hi || (o->kind == O_INT && x != floor(x))) {
        fprintf(stderr, "kiln %s: %s '%s': expected %s in [%g, %g]\n", cmd, o->name, v,
                o->kind == O_INT ? "an integer" : "a number", o->lo, o->hi);
        return 2;
    }
    if (o->kind == O_INT) *(int *)o->dst = (int)x;
    else *(double *)o->dst = x;
    return 0;
}

int kn_cli_opts_parse(const char *cmd, int argc, char **argv, const kn_cli_opt *opts, int nopts,
                      void (*usage)(FILE *)) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
        const kn_cli_opt *o = NULL;
        for (int k = 0; k < nopts && !o; k++)
            if (!strcmp(a, opts[k].name)) o = &opts[k];
        if (!o) { fprintf(stderr, "kiln %s: unknown option '%s' (kiln %s --help)\n", cmd, a, cmd); return 2; }
        if (o->kind == O_FLAG) { *(bool *)o->dst = true; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "kiln %s: %s needs a value\n", cmd, a); return 2; }
        int rc = set_value(cmd, o, argv[++i]);
        if (rc) return rc;
    }
    return 0;
}

kn_status kn_cli_load_model(const char *path, kn_gpt *g, kn_tokenizer *tok, bool *has_tok) {
    kn_gpt_config cfg;
    KN_TRY(kn_checkpoint_config(path, &cfg));
    KN_TRY(kn_gpt_new(g, &cfg));
    kn_safetensors st;
    memset(&st, 0, sizeof st);
    kn_status s = kn_checkpoint_load(path, g, NULL, &st);
    if (s != KN_OK) { kn_gpt_free(g); return s; }
    *has_tok = false;
    const char *hex = kn_safetensors_meta(&st, "kiln.tokenizer");
    if (hex && hex[0]) {
        size_t n = strlen(hex) / 2;
        uint8_t table[256];
        bool ok = strlen(hex) % 2 == 0 && n >= 1 && n <= 256 && (int)n == cfg.vocab;
        for (size_t i = 0; ok && i < n; i++) {
            unsigned v;
            ok = sscanf(hex + 2 * i, "%2x", &v) == 1;
            table[i] = (uint8_t)v;
        }
        if (!ok) s = kn_error(KN_ERR_FORMAT, "%s: its kiln.tokenizer metadata is not %d hex bytes", path, cfg.vocab);
        if (s == KN_OK) s = kn_tokenizer_from_table(tok, table, (int)n);
        *has_tok = s == KN_OK;
    } else if (cfg.vocab == 256) {
        kn_tokenizer_bytes(tok);
        *has_tok = true;
    }
    kn_safetensors_free(&st);
    if (s != KN_OK) kn_gpt_free(g);
    return s;
}

kn_status kn_cli_program_mode(const char *s, kn_program_mode *mode) {
    if (!strcmp(s, "nodes")) *mode = KN_PROGRAM_NODES;
    else if (!strcmp(s, "compiled")) *mode = KN_PROGRAM_COMPILED;
    else return kn_error(KN_ERR_ARG, "--mode '%s': use nodes or compiled", s);
    return KN_OK;
}
