/* test_data_corpus.c — the bundled grammar corpus (deterministic, prefix-stable, English-
 * like), the unigram entropy, the byte tokenizer and batch sampling. */
#include <math.h>
#include <string.h>

#include "kiln/data.h"
#include "kn_test.h"

KN_TEST(data_corpus, deterministic_and_prefix_stable) {
    char *a, *b, *c, *d;
    size_t la, lb, lc, ld;
    KN_ASSERT_OK(kn_corpus_generate(7, 20000, &a, &la));
    KN_ASSERT_OK(kn_corpus_generate(7, 20000, &b, &lb));
    KN_ASSERT_OK(kn_corpus_generate(7, 5000, &c, &lc));
    KN_ASSERT_OK(kn_corpus_generate(8, 20000, &d, &ld));
    cr_assert_eq(la, 20000);
    cr_assert_eq(strlen(a), 20000, "NUL-terminated at nbytes");
    cr_assert(memcmp(a, b, la) == 0, "same seed, same text");
    cr_assert(memcmp(a, c, lc) == 0, "a shorter corpus is a prefix of a longer one");
    cr_assert(memcmp(a, d, la) != 0, "another seed gives another text");
    kn_free(a); kn_free(b); kn_free(c); kn_free(d);
}

KN_TEST(data_corpus, looks_like_english) {
    char *t;
    size_t n;
    KN_ASSERT_OK(kn_corpus_generate(KN_CORPUS_DEFAULT_SEED, 50000, &t, &n));
    for (size_t i = 0; i < n; i++)
        cr_assert((t[i] >= 32 && t[i] < 127) || t[i] == '\n', "byte 0x%02x at %zu is not printable ASCII",
                  (unsigned char)t[i], i);
    cr_assert(t[0] >= 'A' && t[0] <= 'Z', "starts with a capital: %.40s", t);
    /* agreement, articles, questions and clauses all occur */
    const char *must[] = {" sees ", " see ", "The ", ". ", "?", ", ", " an ", " that ", "\n"};
    for (size_t k = 0; k < sizeof must / sizeof must[0]; k++)
        cr_assert(strstr(t, must[k]) != NULL, "'%s' never occurs", must[k]);
    /* grammar rules that a model can learn, checked on the text */
    cr_assert(strstr(t, " a apple") == NULL && strstr(t, " a old ") == NULL, "'a' before a vowel");
    cr_assert(strstr(t, "cats sees") == NULL && strstr(t, "cat see ") == NULL, "subject-verb agreement");
    cr_assert(strstr(t, "  ") == NULL, "no double spaces");
    kn_free(t);
}

KN_TEST(data_corpus, zero_bytes_and_errors) {
    char *t;
    size_t n = 99;
    KN_ASSERT_OK(kn_corpus_generate(1, 0, &t, &n));
    cr_assert_eq(n, 0);
    cr_assert_eq(t[0], '\0');
    kn_free(t);
    KN_ASSERT_ERR(kn_corpus_generate(1, 10, NULL, &n), KN_ERR_ARG);
}

KN_TEST(data_corpus, unigram_entropy) {
    int32_t two[] = {0, 1, 0, 1};
    double h;
    KN_ASSERT_OK(kn_unigram_entropy(two, 4, 2, &h));
    KN_ASSERT_CLOSE(h, log(2.0), 1e-12, 0);
    int32_t one[] = {3, 3, 3};
    KN_ASSERT_OK(kn_unigram_entropy(one, 3, 5, &h));
    KN_ASSERT_CLOSE(h, 0.0, 1e-12, 0);
    int32_t skew[] = {0, 0, 0, 1};
    KN_ASSERT_OK(kn_unigram_entropy(skew, 4, 2, &h));
    KN_ASSERT_CLOSE(h, -(0.75 * log(0.75) + 0.25 * log(0.25)), 1e-12, 0);
    int32_t bad[] = {0, 2};
    KN_ASSERT_ERR(kn_unigram_entropy(bad, 2, 2, &h), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "token 2") != NULL, "%s", kn_last_error());
    KN_ASSERT_ERR(kn_unigram_entropy(two, 0, 2, &h), KN_ERR_ARG);
}

KN_TEST(data_tokenizer, fit_encode_decode) {
    const char *s = "hello, world";
    kn_tokenizer tok;
    KN_ASSERT_OK(kn_tokenizer_fit(&tok, (const uint8_t *)s, strlen(s)));
    cr_assert_eq(tok.vocab_size, 9, "the distinct bytes are ' ,dehlorw', got %d", tok.vocab_size);
    /* ids follow byte order: ' ' < ',' < 'd' < 'e' < 'h' < 'l' < 'o' < 'r' < 'w' */
    cr_assert_eq(tok.id_to_byte[0], ' ');
    cr_assert_eq(tok.byte_to_id['w'], tok.vocab_size - 1);
    int32_t ids[12];
    uint8_t back[13] = {0};
    KN_ASSERT_OK(kn_tokenizer_encode(&tok, (const uint8_t *)s, 12, ids));
    KN_ASSERT_OK(kn_tokenizer_decode(&tok, ids, 12, back));
    cr_assert_str_eq((char *)back, s);
    KN_ASSERT_ERR(kn_tokenizer_encode(&tok, (const uint8_t *)"hex", 3, ids), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "0x78") && strstr(kn_last_error(), "position 2"), "%s", kn_last_error());
    int32_t bad[] = {0, 99};
    KN_ASSERT_ERR(kn_tokenizer_decode(&tok, bad, 2, back), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "id 99"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tokenizer_fit(&tok, (const uint8_t *)s, 0), KN_ERR_ARG);
    uint8_t dup[] = {'a', 'b', 'a'};
    KN_ASSERT_ERR(kn_tokenizer_from_table(&tok, dup, 3), KN_ERR_ARG);
    kn_tokenizer_bytes(&tok);
    cr_assert_eq(tok.vocab_size, 256);
    cr_assert_eq(tok.byte_to_id[200], 200);
}

KN_TEST(data_batch, windows_are_shifted_and_reproducible) {
    int32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = i;
    enum { B = 4, T = 8 };
    int32_t x[B * T], y[B * T], x2[B * T], y2[B * T], x3[B * T], y3[B * T];
    KN_ASSERT_OK(kn_batch_sample(toks, 100, B, T, 42, 0, 5, x, y));
    KN_ASSERT_OK(kn_batch_sample(toks, 100, B, T, 42, 0, 5, x2, y2));
    KN_ASSERT_OK(kn_batch_sample(toks, 100, B, T, 42, 0, 6, x3, y3));
    cr_assert(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "same step, same batch");
    cr_assert(memcmp(x, x3, sizeof x) != 0, "another step, another batch");
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            cr_assert_eq(y[b * T + t], x[b * T + t] + 1, "targets are inputs shifted by one");
            if (t) cr_assert_eq(x[b * T + t], x[b * T + t - 1] + 1, "a window is contiguous");
            cr_assert(x[b * T] >= 0 && x[b * T] + T < 100, "window inside the tokens");
        }
    KN_ASSERT_ERR(kn_batch_sample(toks, 8, B, T, 42, 0, 0, x, y), KN_ERR_ARG);
    KN_ASSERT_OK(kn_batch_sample(toks, 9, B, T, 42, 0, 0, x, y)); /* exactly one window */
    cr_assert_eq(x[0], 0);
    KN_ASSERT_ERR(kn_batch_sample(toks, 100, 0, T, 42, 0, 0, x, y), KN_ERR_ARG);
}
