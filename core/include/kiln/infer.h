/* kiln/infer.h — inference with a KV cache: the GPT's prefill and decode steps as compiled
 * programs, sampling (temperature, top-k, top-p), and a generation loop that streams tokens.
 *
 * A training step sees a whole window of T tokens at once. Generation sees one new token
 * at a time, and without a cache every new token runs the model over the whole window
 * again (kn_gpt_sample, the reference): T times the work for the one row of logits wanted.
 * A KV cache keeps what earlier positions contributed to attention, their keys and
 * values, so a new token costs one position's work plus one read of the cache:
 *
 *   prefill  the prompt [B, T0] in one forward pass, as in training; its keys and values
 *            are written into the cache at positions 0..T0-1, and the logits of the last
 *            position give the first new token (time to first token);
 *   decode   one token per row [B, 1] at position pos: its q, k, v; k and v written into
 *            the cache at pos; q attends over cache positions 0..pos; the logits give the
 *            next token (time per output token).
 *
 * The cache is static: one f32 tensor [layers, 2, B, H, Tmax, D/H] (Tmax = the context)
 * allocated once on the device. The prefill program writes it: its (layer, k|v) blocks are
 * the program's bound outputs (kn_program_bind_output), so the keys and values land there
 * with no copy. The decode program reads it and appends to it: the blocks are its inputs
 * "cache.L.k" / "cache.L.v", and each layer's attention is one attn_decode (kiln/ir.h) over
 * the first pos positions and the new token, which also writes the new token's k and v into
 * the cache at pos (the IR's one op that writes into an operand: without it the new k and v
 * were outputs of the step, copied into the cache after it). The tokens and the positions are
 * inputs the host fills per step, so one compiled decode program serves every position,
 * and its buffers never move: on a GPU it is replayed as one CUDA graph. The prefill
 * program depends on T0 (one is compiled per prompt length and kept).
 *
 * The numbers: the decode step's logits equal the full forward's at the same position to
 * rounding (the sums run in another order), and greedy generation gives the same tokens as
 * kn_gpt_sample (tests/core/test_infer.c), including past the context: there the window
 * slides and the absolute position embeddings of every cached token change, so each new
 * token re-runs the prefill of the last Tmax tokens, exactly as the reference does. */
#ifndef KILN_INFER_H
#define KILN_INFER_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How to draw the next token from a row of logits. temperature 0: argmax (greedy; the
 * first maximum). Otherwise softmax(logits / temperature) restricted to the top_k most
 * likely tokens (0: all) and then to the smallest set of most likely tokens whose
 * probability reaches top_p (1: all), renormalized, and one uniform from the Philox stream
 * per draw. With top_k 0 and top_p 1 the draw is kn_gpt_sample's, token for token. */
typedef struct kn_sampling {
    double temperature; /* >= 0 */
    int top_k;          /* >= 0 */
    double top_p;       /* in (0, 1] */
} kn_sampling;

/* KN_ERR_ARG naming the field when a sampling setting is out of range. */
kn_status kn_sampling_check(const kn_sampling *s);
/* The next token from row[0..V) (see kn_sampling); scratch: V ints (needed only with top_k
 * or top_p set, may be NULL otherwise). */
int32_t kn_sample_row(const float *row, int V, const kn_sampling *s, kn_rng *rng, int32_t *scratch);

typedef struct kn_infer_opts {
    kn_device device;       /* where the programs and the cache live (KN_CPU by default) */
    kn_program_mode mode;   /* NODES (each node its backend's kernel) or COMPILED (generated code) */
    const char *passes;     /* the programs' pass list (kiln/passes.h; NULL: none) */
    bool cuda_graph;        /* COMPILED on a GPU: replay the decode step as one CUDA graph */
    bool cuda_emu;          /* COMPILED on the CPU: the GPU's generated CUDA under the emulator
                             * (kn_program_opts.cuda_emu: a test of the GPU's code path) */
} kn_infer_opts;

enum { KN_INFER_PREFILLS = 8 }; /* prefill programs kept (one per prompt length) */

/* An inference session for B rows at once (every row the same prompt length). */
typedef struct kn_infer {
    const kn_gpt *model;     /* borrowed; its parameters are read at kn_infer_new */
    int B, Tmax, V;          /* rows, the context (cache positions), the vocabulary */
    kn_infer_opts o;
    int len;                 /* positions of the cache filled (0 after kn_infer_new) */
    kn_tensor *params;       /* on the device: the slab (the model's on the CPU, a copy on a GPU) */
    kn_tensor **views;       /* owned: views of params shaped like the parameters */
    kn_tensor *low;          /* owned (NULL: none): the slab rounded to bf16 or f16, on the device,
                              * made when a program reads "NAME@bf16" params (the lowparams pass) */
    kn_tensor **low_views;   /* owned: its views, bound by those names */
    kn_tensor *cache;        /* owned: f32 [layers, 2, B, H, Tmax, D/H] on the device */
    kn_tensor **cache_views; /* owned: 2 * layers views [B, H, Tmax, D/H], (layer, k|v) order */
    kn_program *decode;      /* owned: the decode step */
    kn_tensor *step_in;      /* owned, on the device: i32 [2, B], the decode step's inputs */
    kn_tensor *tok, *pos;    /* owned: views [B] of its rows, bound as "tok" and "pos" */
    int32_t *h_tok, *h_pos;  /* host staging for them: one block of [2 * B], h_pos = h_tok + B */
    kn_program *prefill[KN_INFER_PREFILLS]; /* owned: prefill programs, by prompt length */
    int prefill_T[KN_INFER_PREFILLS];
    kn_tensor *idx[KN_INFER_PREFILLS];     /* owned: their inputs "idx" [B, T] on the device */
    kn_tensor *next;         /* owned, on the device: i32 [B], greedy generation's tokens (the
                              * device's argmax of the logits, kn_device_argmax_rows) */
    float *logits;           /* owned: host [B, V], the last step's logits (not filled by greedy
                              * generation, which brings back only the tokens) */
    int32_t *scratch;        /* owned: [V], for top-k / top-p */
} kn_infer;

/* A session for model (B >= 1 rows, contexts up to the model's): copies the parameters to
 * o->device (o NULL: CPU, NODES, no passes), allocates the zeroed cache there and compiles
 * the decode step. Errors: bad arguments (KN_ERR_ARG), a device or mode that cannot run it
 * (the program's error). The model must outlive the session and not change during it. */
kn_status kn_infer_new(kn_infer *inf, const kn_gpt *model, int B, const kn_infer_opts *o);
void kn_infer_free(kn_infer *inf); /* a zeroed or freed session is fine */
/* Run the prompt ids [B, T] (row-major, 1 <= T <= Tmax, tokens in [0, V)) from position 0:
 * fills cache positions 0..T-1 and inf->logits with the logits of position T-1; len = T. */
kn_status kn_infer_prefill(kn_infer *inf, const int32_t *ids, int T);
/* One token per row (tok[B]) at position len (< Tmax: KN_ERR_ARG when the cache is full):
 * fills cache position len and inf->logits; len += 1. */
kn_status kn_infer_decode(kn_infer *inf, const int32_t *tok);
/* The cache on the host: [layers, 2, B, H, Tmax, D/H] floats into out (for tests). */
kn_status kn_infer_cache_read(const kn_infer *inf, float *out);

/* Called after each new token: i is its position in the rows, tok[B] the tokens. A status
 * other than KN_OK stops the generation with it. */
typedef kn_status (*kn_infer_token_fn)(void *ctx, int i, const int32_t *tok);
/* Extend B prompts ids[b * n + 0..n0) to n tokens each (ids: B rows of n), drawing with s
 * and rng (the rows in order, one draw each per position), calling fn (may be NULL) after
 * each position. A prefill, then decode steps while the cache has room; past Tmax each
 * token runs the prefill of the last Tmax tokens (the window slides, see above). Prompts
 * longer than the context are KN_ERR_ARG (the caller truncates them if it wants). Greedy
 * (temperature 0) takes each row's argmax on the device and copies back B token ids, not
 * the [B, V] logits (inf->logits is then left as it was); the tokens are kn_sample_row's. */
kn_status kn_infer_generate(kn_infer *inf, int32_t *ids, int n0, int n, const kn_sampling *s, kn_rng *rng,
                            kn_infer_token_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* KILN_INFER_H */
