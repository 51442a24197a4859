/* rng.c — Philox4x32-10, a counter-based random number generator, and the streams,
 * uniforms and normals built on it.
 *
 * A counter-based generator has no state to carry: the random words are a pure function
 * philox(counter, key) of a 128-bit counter and a 64-bit key (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC 2011). So element i of a stream can be computed
 * alone, by any CPU or GPU thread, in any order, and the CPU reference kernels and the
 * CUDA kernels draw exactly the same numbers.
 *
 * The function. Ten rounds; each round multiplies counter words 0 and 2 by the constants
 * M0 = 0xD2511F53 and M1 = 0xCD9E8D57 into 64-bit products (hi, lo) and sets
 *     counter = { hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0 },
 * then adds the Weyl constants W0 = 0x9E3779B9, W1 = 0xBB67AE85 to the key before the
 * next round (the first round uses the key as given). This is Random123's
 * philox4x32_10 and cuRAND's Philox4_32_10; the Random123 known-answer vectors are
 * checked in tests/core/test_base_rng.c.
 *
 * Streams. Word i of stream (seed, stream) is word i % 4 of
 *     philox(counter = {lo(i/4), hi(i/4), lo(stream), hi(stream)}, key = {lo(seed), hi(seed)})
 * — cuRAND's layout with subsequence = stream and offset = i. A kn_rng is (seed, stream,
 * offset): offset is the position of the next unused word.
 *
 * What each function consumes, with o the offset on entry (a GPU kernel reproduces value
 * j of a call from kn_rng_word_at(seed, stream, o + ...) alone):
 *   kn_rng_u32            word o; offset += 1.
 *   kn_rng_uniform_f32    value j = kn_u32_to_unit_f32(word o+j) = (w >> 8) * 2^-24, in
 *                         [0, 1); offset += n.
 *   kn_rng_uniform_f64    value j = ((a >> 5) * 2^26 + (b >> 6)) * 2^-53 with a = word
 *                         o+2j, b = word o+2j+1: 53 random bits, in [0, 1); offset += 2n.
 *   kn_rng_normal_f32     Box-Muller on pairs: values 2p and 2p+1 come from a = word o+2p
 *                         and b = word o+2p+1:
 *                             u1 = ((a >> 8) + 1) * 2^-24   in (0, 1], so log(u1) is finite
 *                             u2 = (b >> 8) * 2^-24         in [0, 1)
 *                             r  = sqrt(-2 ln u1)
 *                             value 2p = r cos(2 pi u2),  value 2p+1 = r sin(2 pi u2)
 *                         computed in double and rounded to f32. offset += n rounded up to
 *                         even (an odd n leaves its last sine unused).
 *   kn_rng_normal_f64     the same with 53-bit uniforms: values 2p and 2p+1 use words
 *                         o+4p .. o+4p+3: u1 = 1 - uniform53(word o+4p, word o+4p+1) in
 *                         (0, 1], u2 = uniform53(word o+4p+2, word o+4p+3);
 *                         offset += 2 * (n rounded up to even).
 * A value depends only on (seed, stream) and the positions of its words, so drawing n
 * values in several calls gives the same values as one call, as long as every call but
 * the last asks for an even number of normals.
 *
 * Splitting. kn_rng_split(r, id) returns the stream (seed', stream') where
 *     {lo(seed'), hi(seed'), lo(stream'), hi(stream')} =
 *         philox(counter = {lo(id), hi(id), lo(r->stream), hi(r->stream)},
 *                key = {lo(r->seed) ^ 0x6E6C696B, hi(r->seed) ^ 0x74696C70}),
 * offset 0. The key is xored with a constant ("kiln", "plit") so these 128 bits are not
 * words of any ordinary stream of that seed. For a fixed parent seed philox is a bijection
 * of the counter, so different (stream, id) give different child (seed', stream') pairs:
 * siblings never share a key-and-stream. Streams with different (seed', stream') draw
 * from disjoint (key, counter) inputs, so they can only meet by chance: the probability
 * that two of them produce the same 128-bit block anywhere among N blocks is about
 * N^2 / 2^128, which is what "independent" means for any PRNG split. */
#include <math.h>

#include "kiln/base.h"

#define KN_PHILOX_M0 0xD2511F53u
#define KN_PHILOX_M1 0xCD9E8D57u
#define KN_PHILOX_W0 0x9E3779B9u
#define KN_PHILOX_W1 0xBB67AE85u
#define KN_TWO_PI 6.283185307179586476925286766559

static void kn_philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)KN_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)KN_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c1 = c[1], c3 = c[3];
    c[0] = hi1 ^ c1 ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c3 ^ k[1];
    c[3] = lo0;
}

void kn_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k[0] += KN_PHILOX_W0;
            k[1] += KN_PHILOX_W1;
        }
        kn_philox_round(c, k);
    }
    for (int w = 0; w < 4; w++) out[w] = c[w];
}

/* The four words of block `block` (= word index / 4) of stream (seed, stream). */
static void kn_rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    kn_philox4x32_10(ctr, key, out);
}

uint32_t kn_rng_word_at(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t w[4];
    kn_rng_block(seed, stream, i / 4, w);
    return w[i % 4];
}

/* Words first .. first+n-1 of the stream into out, one philox call per block of four. */
static void kn_rng_words(const kn_rng *r, uint64_t first, uint32_t *out, int64_t n) {
    uint32_t w[4];
    uint64_t have = UINT64_MAX; /* block currently in w */
    for (int64_t j = 0; j < n; j++) {
        uint64_t i = first + (uint64_t)j;
        if (i / 4 != have) {
            have = i / 4;
            kn_rng_block(r->seed, r->stream, have, w);
        }
        out[j] = w[i % 4];
    }
}

kn_rng kn_rng_new(uint64_t seed) { return (kn_rng){.seed = seed, .stream = 0, .offset = 0}; }

kn_rng kn_rng_split(const kn_rng *r, uint64_t id) {
    const uint32_t ctr[4] = {(uint32_t)id, (uint32_t)(id >> 32), (uint32_t)r->stream,
                             (uint32_t)(r->stream >> 32)};
    const uint32_t key[2] = {(uint32_t)r->seed ^ 0x6E6C696Bu,
                             (uint32_t)(r->seed >> 32) ^ 0x74696C70u};
    uint32_t w[4];
    kn_philox4x32_10(ctr, key, w);
    return (kn_rng){
        .seed = w[0] | (uint64_t)w[1] << 32, .stream = w[2] | (uint64_t)w[3] << 32, .offset = 0};
}

uint32_t kn_rng_u32(kn_rng *r) { return kn_rng_word_at(r->seed, r->stream, r->offset++); }

float kn_u32_to_unit_f32(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }

/* 53 random bits from two words, as a double in [0, 1). */
static double kn_unit53(uint32_t a, uint32_t b) {
    return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * 0x1p-53;
}

/* Draws are made in chunks of words on the stack, so no allocation is needed. */
#define KN_RNG_CHUNK 256 /* words; a multiple of 4 */

void kn_rng_uniform_f32(kn_rng *r, float *out, int64_t n) {
    uint32_t w[KN_RNG_CHUNK];
    for (int64_t done = 0; done < n; done += KN_RNG_CHUNK) {
        int64_t m = n - done < KN_RNG_CHUNK ? n - done : KN_RNG_CHUNK;
        kn_rng_words(r, r->offset + (uint64_t)done, w, m);
        for (int64_t j = 0; j < m; j++) out[done + j] = kn_u32_to_unit_f32(w[j]);
    }
    if (n > 0) r->offset += (uint64_t)n;
}

void kn_rng_uniform_f64(kn_rng *r, double *out, int64_t n) {
    uint32_t w[KN_RNG_CHUNK];
    const int64_t per = KN_RNG_CHUNK / 2; /* values per chunk */
    for (int64_t done = 0; done < n; done += per) {
        int64_t m = n - done < per ? n - done : per;
        kn_rng_words(r, r->offset + 2 * (uint64_t)done, w, 2 * m);
        for (int64_t j = 0; j < m; j++) out[done + j] = kn_unit53(w[2 * j], w[2 * j + 1]);
    }
    if (n > 0) r->offset += 2 * (uint64_t)n;
}

void kn_rng_normal_f32(kn_rng *r, float *out, int64_t n) {
    uint32_t w[KN_RNG_CHUNK];
    const int64_t per = KN_RNG_CHUNK; /* values per chunk: one word each, in pairs */
    for (int64_t done = 0; done < n; done += per) {
        int64_t m = n - done < per ? n - done : per;
        kn_rng_words(r, r->offset + (uint64_t)done, w, m + (m & 1));
        for (int64_t j = 0; j < m; j += 2) {
            double u1 = ((double)(w[j] >> 8) + 1.0) * 0x1p-24;
            double u2 = (double)(w[j + 1] >> 8) * 0x1p-24;
            double rad = sqrt(-2.0 * log(u1)), th = KN_TWO_PI * u2;
            out[done + j] = (float)(rad * cos(th));
            if (j + 1 < m) out[done + j + 1] = (float)(rad * sin(th));
        }
    }
    if (n > 0) r->offset += (uint64_t)(n + (n & 1));
}

void kn_rng_normal_f64(kn_rng *r, double *out, int64_t n) {
    uint32_t w[KN_RNG_CHUNK];
    const int64_t per = KN_RNG_CHUNK / 2; /* values per chunk: two words each, in pairs */
    for (int64_t done = 0; done < n; done += per) {
        int64_t m = n - done < per ? n - done : per;
        kn_rng_words(r, r->offset + 2 * (uint64_t)done, w, 2 * (m + (m & 1)));
        for (int64_t j = 0; j < m; j += 2) {
            double u1 = 1.0 - kn_unit53(w[2 * j], w[2 * j + 1]);
            double u2 = kn_unit53(w[2 * j + 2], w[2 * j + 3]);
            double rad = sqrt(-2.0 * log(u1)), th = KN_TWO_PI * u2;
            out[done + j] = rad * cos(th);
            if (j + 1 < m) out[done + j + 1] = rad * sin(th);
        }
    }
    if (n > 0) r->offset += 2 * (uint64_t)(n + (n & 1));
}
