/* test_data_tokens.c — the KNTK token file: round trips (u8 with a tokenizer table, i32
 * without) and one specific error for each way a file can be bad. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/data.h"
#include "kn_test.h"

static void tmp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/kiln-test-tokens-%ld-%s.kntk", (long)getpid(), tag);
}

KN_TEST(data_tokens, round_trip_u8_with_table) {
    const char *text = "the cat sees the dog.";
    size_t n = strlen(text);
    kn_tokenizer tok;
    KN_ASSERT_OK(kn_tokenizer_fit(&tok, (const uint8_t *)text, n));
    int32_t ids[64];
    KN_ASSERT_OK(kn_tokenizer_encode(&tok, (const uint8_t *)text, n, ids));
    char path[128];
    tmp_path(path, sizeof path, "u8");
    KN_ASSERT_OK(kn_tokens_write(path, ids, (int64_t)n, tok.vocab_size, &tok));
    uint8_t *raw;
    size_t len;
    KN_ASSERT_OK(kn_file_read_all(path, &raw, &len));
    cr_assert_eq(len, KN_TOKENS_HEADER_BYTES + (size_t)tok.vocab_size + n, "u8 tokens + table, got %zu bytes", len);
    cr_assert(memcmp(raw, "KNTK", 4) == 0);
    cr_assert_eq(raw[4], 1, "version 1, little-endian");
    cr_assert_eq(raw[8], KN_DT_U8);
    kn_free(raw);
    kn_token_data d;
    KN_ASSERT_OK(kn_tokens_read(path, &d));
    cr_assert_eq(d.count, (int64_t)n);
    cr_assert(d.has_tokenizer);
    cr_assert_eq(d.vocab_size, tok.vocab_size);
    cr_assert(memcmp(d.tokens, ids, n * sizeof(int32_t)) == 0);
    uint8_t back[64] = {0};
    KN_ASSERT_OK(kn_tokenizer_decode(&d.tok, d.tokens, n, back));
    cr_assert_str_eq((char *)back, text);
    kn_token_data_free(&d);
    remove(path);
}

KN_TEST(data_tokens, round_trip_i32_without_table) {
    int32_t ids[5] = {0, 299, 17, 256, 1};
    char path[128];
    tmp_path(path, sizeof path, "i32");
    KN_ASSERT_OK(kn_tokens_write(path, ids, 5, 300, NULL));
    kn_token_data d;
    KN_ASSERT_OK(kn_tokens_read(path, &d));
    cr_assert_eq(d.count, 5);
    cr_assert(!d.has_tokenizer);
    cr_assert_eq(d.vocab_size, 300);
    cr_assert(memcmp(d.tokens, ids, sizeof ids) == 0);
    kn_token_data_free(&d);
    KN_ASSERT_ERR(kn_tokens_write(path, ids, 5, 299, NULL), KN_ERR_ARG); /* 299 is out of range */
    remove(path);
}

/* A valid file image to corrupt: 3 u8 tokens, vocab 4, a table. */
static size_t good_image(uint8_t *b) {
    memset(b, 0, 64);
    memcpy(b, "KNTK", 4);
    b[4] = 1;           /* version */
    b[8] = KN_DT_U8;    /* dtype */
    b[12] = 4;          /* vocab */
    b[16] = 3;          /* count */
    b[24] = 4;          /* table_len */
    memcpy(b + 32, "abcd", 4);
    b[36] = 0; b[37] = 3; b[38] = 2;
    return 39;
}

static void expect_format_error(const uint8_t *b, size_t len, const char *needle) {
    kn_token_data d;
    KN_ASSERT_ERR(kn_tokens_parse(b, len, "bad.kntk", &d), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), needle) != NULL, "expected '%s' in: %s", needle, kn_last_error());
    cr_assert(strstr(kn_last_error(), "bad.kntk") != NULL, "the message names the file: %s", kn_last_error());
}

KN_TEST(data_tokens, bad_files_give_specific_errors) {
    uint8_t b[64];
    size_t n = good_image(b);
    kn_token_data d;
    KN_ASSERT_OK(kn_tokens_parse(b, n, "good", &d));
    cr_assert_eq(d.tokens[1], 3);
    kn_token_data_free(&d);

    n = good_image(b); b[0] = 'X';                 expect_format_error(b, n, "magic");
    n = good_image(b); b[4] = 2;                   expect_format_error(b, n, "version 2");
    n = good_image(b); b[8] = KN_DT_F32;           expect_format_error(b, n, "dtype code");
    n = good_image(b); b[12] = 0;                  expect_format_error(b, n, "vocab_size 0");
    n = good_image(b); b[13] = 1;                  expect_format_error(b, n, "vocab_size 260"); /* > 256 for u8 */
    n = good_image(b); b[24] = 3;                  expect_format_error(b, n, "table");
    n = good_image(b); b[28] = 1;                  expect_format_error(b, n, "reserved");
    n = good_image(b); b[33] = 'a';                expect_format_error(b, n, "appears twice");
    n = good_image(b); b[37] = 4;                  expect_format_error(b, n, "token 4 at position 1");
    n = good_image(b);                             expect_format_error(b, n - 1, "truncated");
    n = good_image(b);                             expect_format_error(b, 20, "truncated");
    n = good_image(b); b[16] = 200;                expect_format_error(b, n, "truncated");
    n = good_image(b); b[n] = 0;                   expect_format_error(b, n + 1, "trailing");
    n = good_image(b); b[23] = 0x80;               expect_format_error(b, n, "truncated"); /* huge count */
    KN_ASSERT_ERR(kn_tokens_read("/nonexistent/dir/x.kntk", &d), KN_ERR_IO);
    cr_assert(strstr(kn_last_error(), "/nonexistent/dir/x.kntk") != NULL, "%s", kn_last_error());
}
