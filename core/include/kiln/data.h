/* kiln/data.h — what a training run reads and writes: the bundled corpus, the byte/char
 * tokenizer, token files, batches, and safetensors checkpoints.
 *
 *   corpus     a deterministic probabilistic grammar of English-like sentences: the same
 *              seed gives the same bytes on every machine, so no download is ever needed
 *              (datasets/README.md describes it and its unigram baseline);
 *   tokenizer  one token per byte; the vocabulary is the set of bytes seen, in byte order
 *              (or all 256 bytes);
 *   tokens     the token file format "KNTK" (little-endian, versioned, validated on read);
 *   batches    windows of the token stream at positions drawn from a Philox stream that is a
 *              pure function of (seed, step), so a resumed run draws the same batches;
 *   safetensors  the checkpoint format PyTorch's `safetensors` reads: an 8-byte little-endian
 *              header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
 *              "__metadata__": {string: string}}, then the raw little-endian tensor bytes.
 *
 * Every reader validates what it reads and fails with KN_ERR_FORMAT (or KN_ERR_IO) and a
 * message naming the file and what is wrong; nothing here aborts on a bad file. */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include "kiln/base.h"
#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- corpus */

/* Generate `nbytes` bytes of the grammar corpus with `seed` into a new buffer (*out, owned
 * by the caller, kn_free; NUL-terminated, *out_len == nbytes). The text is whole
 * sentences ("The small cats see a red ball near the river.") in paragraphs separated by
 * newlines, cut at nbytes. Pure function of (seed, nbytes) — the prefix for a smaller
 * nbytes is the same text. */
kn_status kn_corpus_generate(uint64_t seed, size_t nbytes, char **out, size_t *out_len);

/* The default bundled corpus: seed and size used by `kiln train` when no --data is given. */
#define KN_CORPUS_DEFAULT_SEED 1337u
#define KN_CORPUS_DEFAULT_BYTES (1u << 20)

/* Entropy of the unigram (single-token frequency) distribution of tokens[0..n) in nats:
 * the loss of the best model that ignores context. The baseline a language model must
 * beat. Tokens must lie in [0, vocab) (KN_ERR_ARG otherwise). */
kn_status kn_unigram_entropy(const int32_t *tokens, int64_t n, int vocab, double *nats);

/* ---------------------------------------------------------------- tokenizer */

typedef struct kn_tokenizer {
    int vocab_size;            /* 1..256 */
    uint8_t id_to_byte[256];   /* the byte token id i stands for (first vocab_size used) */
    int16_t byte_to_id[256];   /* the id of a byte, or -1 when the byte is not in the vocab */
} kn_tokenizer;

/* All 256 bytes, id == byte. */
void kn_tokenizer_bytes(kn_tokenizer *tok);
/* The bytes that occur in text[0..n), in increasing byte order. KN_ERR_ARG when n == 0. */
kn_status kn_tokenizer_fit(kn_tokenizer *tok, const uint8_t *text, size_t n);
/* A tokenizer from its table (id -> byte): bytes must be distinct. */
kn_status kn_tokenizer_from_table(kn_tokenizer *tok, const uint8_t *table, int vocab_size);
/* text[0..n) -> ids[0..n). KN_ERR_ARG naming the byte and its position when a byte is not
 * in the vocabulary. */
kn_status kn_tokenizer_encode(const kn_tokenizer *tok, const uint8_t *text, size_t n, int32_t *ids);
/* ids[0..n) -> text[0..n). KN_ERR_ARG naming the id and its position when out of range. */
kn_status kn_tokenizer_decode(const kn_tokenizer *tok, const int32_t *ids, size_t n, uint8_t *text);

/* ---------------------------------------------------------------- token files
 *
 * Layout (every integer little-endian), version 1:
 *   offset  size  field
 *        0     4  magic "KNTK"
 *        4     4  u32 version = 1
 *        8     4  u32 dtype of the tokens, a kn_dtype code: 6 (KN_DT_U8) or 4 (KN_DT_I32)
 *       12     4  u32 vocab_size, 1..2^31-1 (u8 tokens need vocab_size <= 256)
 *       16     8  u64 count: number of tokens
 *       24     4  u32 table_len: bytes of tokenizer table that follow, 0 or vocab_size
 *       28     4  u32 reserved, 0
 *       32     table_len bytes: the byte each token id stands for (the byte tokenizer)
 *   32+table_len  count tokens of the dtype, each in [0, vocab_size)
 * The file ends there: trailing or missing bytes are errors. */
#define KN_TOKENS_MAGIC "KNTK"
#define KN_TOKENS_VERSION 1u
#define KN_TOKENS_HEADER_BYTES 32

typedef struct kn_token_data {
    int32_t *tokens;      /* owned, count entries */
    int64_t count;
    int vocab_size;
    bool has_tokenizer;   /* the file carried a byte table */
    kn_tokenizer tok;     /* valid when has_tokenizer */
} kn_token_data;

/* Write tokens (stored as u8 when vocab_size <= 256, else i32); tok may be NULL (no
 * table), otherwise tok->vocab_size must equal vocab_size. */
kn_status kn_tokens_write(const char *path, const int32_t *tokens, int64_t count, int vocab_size,
                          const kn_tokenizer *tok);
/* Read and validate a token file; errors name the path and the field (magic, version,
 * dtype, sizes, a token out of range, a truncated or overlong file). */
kn_status kn_tokens_read(const char *path, kn_token_data *out);
/* The same from bytes in memory (`what` names the source in messages). */
kn_status kn_tokens_parse(const uint8_t *buf, size_t len, const char *what, kn_token_data *out);
void kn_token_data_free(kn_token_data *d);

/* Read a whole file into a new buffer (kn_free). KN_ERR_IO naming the path on failure. */
kn_status kn_file_read_all(const char *path, uint8_t **out, size_t *len);

/* ---------------------------------------------------------------- batches */

/* B windows of T+1 tokens from tokens[0..n): inputs x[b][t] = tokens[p_b + t] and targets
 * y[b][t] = tokens[p_b + t + 1], with the start p_b drawn uniformly from [0, n - T - 1] by
 * a 64-bit draw from words 2i and 2i+1 of Philox stream (seed, stream), i = step*B + b
 * (stateless: kn_rng_word_at). Pure function of its inputs.
 * x and y hold B*T int32 each. KN_ERR_ARG when n < T + 1. */
kn_status kn_batch_sample(const int32_t *tokens, int64_t n, int B, int T, uint64_t seed,
                          uint64_t stream, int64_t step, int32_t *x, int32_t *y);

/* ---------------------------------------------------------------- safetensors */

typedef struct kn_st_tensor {
    const char *name;            /* reader: owned by the kn_safetensors */
    kn_dtype dtype;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    const void *data;            /* writer: the caller's bytes; reader: inside the file buffer */
    uint64_t nbytes;
} kn_st_tensor;

typedef struct kn_st_meta {
    const char *key, *value;
} kn_st_meta;

typedef struct kn_safetensors {
    kn_st_tensor *tensors;       /* owned; in the order of their data offsets */
    int n_tensors;
    kn_st_meta *meta;            /* owned; the "__metadata__" map */
    int n_meta;
    uint8_t *buf;                /* owned: the whole file */
    size_t len;
} kn_safetensors;

/* The safetensors name of a dtype ("F32", "BF16", ...), NULL for an invalid one. */
const char *kn_st_dtype_name(kn_dtype dt);
/* Write n tensors (data laid out in the given order, 8-byte aligned header) and a metadata
 * map to path, atomically (a temporary file renamed over path). Names must be distinct and
 * not "__metadata__"; data must hold exactly prod(shape) * dtype size bytes (nbytes). */
kn_status kn_safetensors_write(const char *path, int n, const kn_st_tensor *tensors, int n_meta,
                               const kn_st_meta *meta);
/* Read and validate: the header length, JSON syntax, each entry's dtype/shape/data_offsets,
 * offsets that tile the data section exactly. KN_ERR_FORMAT naming the path and the problem. */
kn_status kn_safetensors_read(const char *path, kn_safetensors *out);
/* The same on a buffer (copied; `what` names it in messages). */
kn_status kn_safetensors_parse(const uint8_t *buf, size_t len, const char *what, kn_safetensors *out);
void kn_safetensors_free(kn_safetensors *st);
/* Lookups: NULL when absent. */
const kn_st_tensor *kn_safetensors_find(const kn_safetensors *st, const char *name);
const char *kn_safetensors_meta(const kn_safetensors *st, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* KILN_DATA_H */
