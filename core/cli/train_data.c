/* train_data.c — `kiln train`'s data and checkpoint (train_impl.h): the tokens of --data
 * (the bundled grammar corpus, a text file tokenized by a fitted byte tokenizer, or a
 * token file with its own tokenizer), split into training and held-out tokens, and the
 * checkpoint's metadata, which is what makes --resume exact: the run settings, the step,
 * the tokenizer (a resumed run checks it against its data) and the scaler's state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_impl.h"

kn_status kn_train_data_load(const kn_train_opts *o, kn_train_data *d) {
    memset(d, 0, sizeof *d);
    uint8_t *text = NULL;
    size_t len = 0;
    if (!strcmp(o->data, "grammar")) {
        char *t;
        KN_TRY(kn_corpus_generate(o->data_seed, (size_t)o->data_bytes, &t, &len));
        text = (uint8_t *)t;
    } else {
        KN_TRY(kn_file_read_all(o->data, &text, &len));
        if (len >= 4 && !memcmp(text, KN_TOKENS_MAGIC, 4)) {
            kn_token_data td;
            kn_status st = kn_tokens_parse(text, len, o->data, &td);
            kn_free(text);
            KN_TRY(st);
            d->tokens = td.tokens;
            d->n = td.count;
            d->vocab = td.vocab_size;
            d->has_tok = td.has_tokenizer;
            d->tok = td.tok;
            goto split;
        }
    }
    if (len < 16) {
        kn_free(text);
        return kn_error(KN_ERR_ARG, "--data %s: %zu bytes is too little text to train on", o->data, len);
    }
    kn_status st = kn_tokenizer_fit(&d->tok, text, len);
    d->tokens = st == KN_OK ? kn_malloc(len * sizeof(int32_t)) : NULL;
    if (st == KN_OK && !d->tokens) st = kn_error(KN_ERR_OOM, "out of memory for %zu tokens", len);
    if (st == KN_OK) st = kn_tokenizer_encode(&d->tok, text, len, d->tokens);
    kn_free(text);
    if (st != KN_OK) { kn_free(d->tokens); return st; }
    d->n = (int64_t)len;
    d->vocab = d->tok.vocab_size;
    d->has_tok = true;
split:
    d->n_train = d->n - d->n / 10; /* the last 10% is held out */
    KN_TRY(kn_unigram_entropy(d->tokens, d->n, d->vocab, &d->unigram));
    if (d->n - d->n_train < (int64_t)o->context + 1 || d->n_train < (int64_t)o->context + 1) {
        kn_free(d->tokens);
        return kn_error(KN_ERR_ARG, "--data %s: %lld tokens are too few for context %d (10%% is held out)", o->data,
                        (long long)d->n, o->context);
    }
    return KN_OK;
}

void kn_train_tok_hex(const kn_train_data *d, char *buf) {
    buf[0] = '\0';
    if (!d->has_tok) return;
    for (int i = 0; i < d->tok.vocab_size; i++) snprintf(buf + 2 * i, 3, "%02x", d->tok.id_to_byte[i]);
}

/* The checkpoint's metadata: the settings of kn_train_opts_to_meta, the step, the tokenizer, where
 * the data's random stream stands, and the loss scaler's state. */
kn_status kn_train_save(const kn_train_opts *o, const kn_trainer *tr, const kn_train_data *d, int64_t step) {
    char vals[KN_TRAIN_META_MAX][600];
    const char *keys[KN_TRAIN_META_MAX], *pv[KN_TRAIN_META_MAX];
    int n = kn_train_opts_to_meta(o, keys, vals);
    snprintf(vals[n], sizeof vals[n], "%lld", (long long)step);
    keys[n++] = "kiln.train.step";
    kn_train_tok_hex(d, vals[n]);
    keys[n++] = "kiln.tokenizer";
    snprintf(vals[n], sizeof vals[n], "philox seed=%llu stream=0 word=%lld (batch positions; 2 words per window)",
             (unsigned long long)o->seed, (long long)(2 * step * o->batch));
    keys[n++] = "kiln.rng.data";
    if (tr->scaler.mode != KN_LOSS_SCALE_NONE || tr->scaler.skipped > 0) { /* the scaler's state, for --resume */
        snprintf(vals[n], sizeof vals[n], "%.17g %lld %lld", tr->scaler.scale, (long long)tr->scaler.good_steps,
                 (long long)tr->scaler.skipped);
        keys[n++] = "kiln.loss_scale";
    }
    for (int i = 0; i < n; i++) pv[i] = vals[i];
    return kn_checkpoint_save(o->out, tr->model, &tr->opt, n, keys, pv);
}

