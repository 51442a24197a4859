/* tokens.c — the byte/char tokenizer, the KNTK token file format, and batch sampling.
 *
 * Tokenizer: one token per byte. Fitting it to a text keeps only the bytes that occur (the
 * grammar corpus has about 50), which keeps the model's embedding and output layer small;
 * the id order is the byte order, so the mapping is reproducible from the text alone.
 *
 * Token files: a 32-byte little-endian header, an optional byte table (the tokenizer) and
 * the tokens (layout in kiln/data.h). Every field is checked on read and every error names
 * the file and the field, because a token file is input a user can get wrong.
 *
 * Batches: the window starts come from a counter-based Philox stream indexed by the step,
 * so batch k is the same whether the run started at step 0 or resumed at step k. */
#include <errno.h>
#include <string.h>

#include "kiln/data.h"

/* ---------------------------------------------------------------- tokenizer */

void kn_tokenizer_bytes(kn_tokenizer *tok) {
    tok->vocab_size = 256;
    for (int b = 0; b < 256; b++) {
        tok->id_to_byte[b] = (uint8_t)b;
        tok->byte_to_id[b] = (int16_t)b;
    }
}

kn_status kn_tokenizer_from_table(kn_tokenizer *tok, const uint8_t *table, int vocab_size) {
    if (!tok || !table || vocab_size < 1 || vocab_size > 256)
        return kn_error(KN_ERR_ARG, "kn_tokenizer_from_table: need a table of 1..256 bytes (got %d)", vocab_size);
    kn_tokenizer t;
    for (int b = 0; b < 256; b++) t.byte_to_id[b] = -1;
    t.vocab_size = vocab_size;
    for (int i = 0; i < vocab_size; i++) {
        if (t.byte_to_id[table[i]] >= 0)
            return kn_error(KN_ERR_ARG, "kn_tokenizer_from_table: byte 0x%02x appears twice (ids %d and %d)",
                            table[i], t.byte_to_id[table[i]], i);
        t.byte_to_id[table[i]] = (int16_t)i;
        t.id_to_byte[i] = table[i];
    }
    for (int i = vocab_size; i < 256; i++) t.id_to_byte[i] = 0;
    *tok = t;
    return KN_OK;
}

kn_status kn_tokenizer_fit(kn_tokenizer *tok, const uint8_t *text, size_t n) {
    if (!tok || !text || n == 0) return kn_error(KN_ERR_ARG, "kn_tokenizer_fit: need a non-empty text");
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++) seen[text[i]] = true;
    uint8_t table[256];
    int v = 0;
    for (int b = 0; b < 256; b++)
        if (seen[b]) table[v++] = (uint8_t)b;
    return kn_tokenizer_from_table(tok, table, v);
}

kn_status kn_tokenizer_encode(const kn_tokenizer *tok, const uint8_t *text, size_t n, int32_t *ids) {
    if (!tok || (n && (!text || !ids))) return kn_error(KN_ERR_ARG, "kn_tokenizer_encode: NULL argument");
    for (size_t i = 0; i < n; i++) {
        int id = tok->byte_to_id[text[i]];
        if (id < 0)
            return kn_error(KN_ERR_ARG, "kn_tokenizer_encode: byte 0x%02x at position %zu is not in the vocabulary "
                            "(%d tokens)", text[i], i, tok->vocab_size);
        ids[i] = id;
    }
    return KN_OK;
}

kn_status kn_tokenizer_decode(const kn_tokenizer *tok, const int32_t *ids, size_t n, uint8_t *text) {
    if (!tok || (n && (!text || !ids))) return kn_error(KN_ERR_ARG, "kn_tokenizer_decode: NULL argument");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return kn_error(KN_ERR_ARG, "kn_tokenizer_decode: id %d at position %zu is outside [0, %d)", ids[i], i,
                            tok->vocab_size);
        text[i] = tok->id_to_byte[ids[i]];
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- little-endian helpers */

static void put_u32(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* ---------------------------------------------------------------- files */

kn_status kn_file_read_all(const char *path, uint8_t **out, size_t *len) {
    if (!path || !out || !len) return kn_error(KN_ERR_ARG, "kn_file_read_all: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return kn_error(KN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = kn_malloc(cap);
    while (buf) {
        if (n == cap) {
            uint8_t *p = kn_realloc(buf, cap * 2);
            if (!p) { kn_free(buf); buf = NULL; break; }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (!buf) return kn_error(KN_ERR_OOM, "out of memory reading '%s'", path);
    if (bad) {
        kn_free(buf);
        return kn_error(KN_ERR_IO, "error reading '%s'", path);
    }
    *out = buf;
    *len = n;
    return KN_OK;
}

kn_status kn_tokens_write(const char *path, const int32_t *tokens, int64_t count, int vocab_size,
                          const kn_tokenizer *tok) {
    if (!path || count < 0 || (count && !tokens) || vocab_size < 1)
        return kn_error(KN_ERR_ARG, "kn_tokens_write: need a path, count >= 0 (got %lld), vocab_size >= 1 (got %d)",
                        (long long)count, vocab_size);
    if (tok && tok->vocab_size != vocab_size)
        return kn_error(KN_ERR_ARG, "kn_tokens_write: tokenizer has %d tokens but vocab_size is %d", tok->vocab_size,
                        vocab_size);
    for (int64_t i = 0; i < count; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab_size)
            return kn_error(KN_ERR_ARG, "kn_tokens_write: token %d at position %lld is outside [0, %d)", tokens[i],
                            (long long)i, vocab_size);
    bool u8 = vocab_size <= 256;
    uint8_t h[KN_TOKENS_HEADER_BYTES] = {0};
    memcpy(h, KN_TOKENS_MAGIC, 4);
    put_u32(h + 4, KN_TOKENS_VERSION);
    put_u32(h + 8, u8 ? KN_DT_U8 : KN_DT_I32);
    put_u32(h + 12, (uint32_t)vocab_size);
    put_u64(h + 16, (uint64_t)count);
    put_u32(h + 24, tok ? (uint32_t)vocab_size : 0);
    FILE *f = fopen(path, "wb");
    if (!f) return kn_error(KN_ERR_IO, "kn_tokens_write: cannot create '%s': %s", path, strerror(errno));
    bool ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    if (ok && tok) ok = fwrite(tok->id_to_byte, 1, (size_t)vocab_size, f) == (size_t)vocab_size;
    uint8_t chunk[4096];
    for (int64_t i = 0; ok && i < count;) {
        size_t k = 0;
        for (; i < count && k + 4 <= sizeof chunk; i++) {
            if (u8) chunk[k++] = (uint8_t)tokens[i];
            else { put_u32(chunk + k, (uint32_t)tokens[i]); k += 4; }
        }
        ok = fwrite(chunk, 1, k, f) == k;
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) return kn_error(KN_ERR_IO, "kn_tokens_write: error writing '%s'", path);
    return KN_OK;
}

kn_status kn_tokens_parse(const uint8_t *buf, size_t len, const char *what, kn_token_data *out) {
    if (!out || (len && !buf)) return kn_error(KN_ERR_ARG, "kn_tokens_parse: NULL argument");
    if (!what) what = "<buffer>";
    if (len < KN_TOKENS_HEADER_BYTES)
        return kn_error(KN_ERR_FORMAT, "%s: truncated token file: %zu bytes, the header alone is %d", what, len,
                        KN_TOKENS_HEADER_BYTES);
    if (memcmp(buf, KN_TOKENS_MAGIC, 4) != 0)
        return kn_error(KN_ERR_FORMAT, "%s: not a kiln token file (magic %02x %02x %02x %02x, expected \"KNTK\")", what,
                        buf[0], buf[1], buf[2], buf[3]);
    uint32_t version = get_u32(buf + 4), dtype = get_u32(buf + 8), vocab = get_u32(buf + 12);
    uint64_t count = get_u64(buf + 16);
    uint32_t table_len = get_u32(buf + 24), reserved = get_u32(buf + 28);
    if (version != KN_TOKENS_VERSION)
        return kn_error(KN_ERR_FORMAT, "%s: token file version %u, this kiln reads version %u", what, version,
                        KN_TOKENS_VERSION);
    if (dtype != KN_DT_U8 && dtype != KN_DT_I32)
        return kn_error(KN_ERR_FORMAT, "%s: token dtype code %u, expected %d (u8) or %d (i32)", what, dtype, KN_DT_U8,
                        KN_DT_I32);
    if (vocab < 1 || vocab > INT32_MAX || (dtype == KN_DT_U8 && vocab > 256))
        return kn_error(KN_ERR_FORMAT, "%s: vocab_size %u is invalid for %s tokens", what, vocab,
                        dtype == KN_DT_U8 ? "u8" : "i32");
    if (table_len != 0 && (table_len != vocab || vocab > 256))
        return kn_error(KN_ERR_FORMAT, "%s: tokenizer table of %u bytes, expected 0 or vocab_size %u (<= 256)", what,
                        table_len, vocab);
    if (reserved != 0) return kn_error(KN_ERR_FORMAT, "%s: reserved header field is %u, expected 0", what, reserved);
    size_t esize = dtype == KN_DT_U8 ? 1 : 4;
    size_t after_header = len - KN_TOKENS_HEADER_BYTES;
    size_t body = after_header >= table_len ? after_header - table_len : 0;
    if (after_header < table_len || count > body / esize)
        return kn_error(KN_ERR_FORMAT, "%s: truncated token file: header says %llu tokens of %zu bytes after a %u-byte "
                        "table, file has %zu bytes", what, (unsigned long long)count, esize, table_len, len);
    if (body != count * esize)
        return kn_error(KN_ERR_FORMAT, "%s: %zu trailing bytes after %llu tokens", what, body - count * esize,
                        (unsigned long long)count);
    kn_token_data d = {.count = (int64_t)count, .vocab_size = (int)vocab};
    if (table_len) {
        kn_status st = kn_tokenizer_from_table(&d.tok, buf + KN_TOKENS_HEADER_BYTES, (int)vocab);
        if (st != KN_OK) return kn_error(KN_ERR_FORMAT, "%s: bad tokenizer table: %s", what, kn_last_error());
        d.has_tokenizer = true;
    }
    d.tokens = kn_malloc(count * sizeof(int32_t));
    if (!d.tokens) return kn_error(KN_ERR_OOM, "%s: out of memory for %llu tokens", what, (unsigned long long)count);
    const uint8_t *p = buf + KN_TOKENS_HEADER_BYTES + table_len;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t t = esize == 1 ? p[i] : get_u32(p + 4 * i);
        if (t >= vocab) {
            kn_free(d.tokens);
            return kn_error(KN_ERR_FORMAT, "%s: token %u at position %llu is outside [0, %u)", what, t,
                            (unsigned long long)i, vocab);
        }
        d.tokens[i] = (int32_t)t;
    }
    *out = d;
    return KN_OK;
}

kn_status kn_tokens_read(const char *path, kn_token_data *out) {
    uint8_t *buf;
    size_t len;
    KN_TRY(kn_file_read_all(path, &buf, &len));
    kn_status st = kn_tokens_parse(buf, len, path, out);
    kn_free(buf);
    return st;
}

void kn_token_data_free(kn_token_data *d) {
    if (!d) return;
    kn_free(d->tokens);
    d->tokens = NULL;
    d->count = 0;
}

/* ---------------------------------------------------------------- batches */

kn_status kn_batch_sample(const int32_t *tokens, int64_t n, int B, int T, uint64_t seed, uint64_t stream,
                          int64_t step, int32_t *x, int32_t *y) {
    if (!tokens || !x || !y || B < 1 || T < 1 || step < 0)
        return kn_error(KN_ERR_ARG, "kn_batch_sample: need tokens, x, y, B >= 1 (got %d), T >= 1 (got %d), "
                        "step >= 0 (got %lld)", B, T, (long long)step);
    if (n < (int64_t)T + 1)
        return kn_error(KN_ERR_ARG, "kn_batch_sample: %lld tokens are too few for windows of T+1 = %d", (long long)n,
                        T + 1);
    uint64_t span = (uint64_t)(n - T); /* starts in [0, n - T - 1] */
    for (int b = 0; b < B; b++) {
        uint64_t i = (uint64_t)step * (uint64_t)B + (uint64_t)b;
        uint64_t r = (uint64_t)kn_rng_word_at(seed, stream, 2 * i) << 32 | kn_rng_word_at(seed, stream, 2 * i + 1);
        int64_t p = (int64_t)(r % span);
        memcpy(x + (size_t)b * T, tokens + p, (size_t)T * sizeof(int32_t));
        memcpy(y + (size_t)b * T, tokens + p + 1, (size_t)T * sizeof(int32_t));
    }
    return KN_OK;
}
