/* test_base_json.c — the JSON writer: exact output (compact and pretty), escaping,
 * UTF-8 repair, numbers, misuse errors, file mode, out of memory, and random documents
 * checked by a small strict validator. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"

/* ---------------------------------------------------------------- a strict validator */

typedef struct {
    const char *s;
} jv;
static void jv_ws(jv *p) {
    while (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r') p->s++;
}
static bool jv_value(jv *p, int depth);

/* A string, with escapes checked and raw bytes required to be valid UTF-8 (no control
 * characters). */
static bool jv_string(jv *p) {
    if (*p->s++ != '"') return false;
    for (;;) {
        unsigned char c = (unsigned char)*p->s;
        if (c == '"') {
            p->s++;
            return true;
        }
        if (c < 0x20) return false;
        if (c == '\\') {
            p->s++;
            if (*p->s == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (!strchr("0123456789abcdefABCDEF", p->s[k]) || !p->s[k]) return false;
                p->s += 5;
            } else if (*p->s && strchr("\"\\/bfnrt", *p->s))
                p->s++;
            else
                return false;
            continue;
        }
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || (n == 2 && c < 0xC2) || (n == 4 && c > 0xF4)) return false;
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 31u) : n == 3 ? (c & 15u) : (c & 7u);
        for (int k = 1; k < n; k++) {
            unsigned char b = (unsigned char)p->s[k];
            if ((b & 0xC0) != 0x80) return false;
            cp = cp << 6 | (b & 63u);
        }
        if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        p->s += n;
    }
}

static bool jv_number(jv *p) {
    const char *s = p->s;
    if (*s == '-') s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9') s++;
    else
        return false;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    p->s = s;
    return true;
}

static bool jv_value(jv *p, int depth) {
    jv_ws(p);
    if (depth > 100) return false;
    char c = *p->s;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->s++;
        jv_ws(p);
        if (*p->s == close) {
            p->s++;
            return true;
        }
        for (;;) {
            if (c == '{') {
                jv_ws(p);
                if (!jv_string(p)) return false;
                jv_ws(p);
                if (*p->s++ != ':') return false;
            }
            if (!jv_value(p, depth + 1)) return false;
            jv_ws(p);
            if (*p->s == ',') {
                p->s++;
                continue;
            }
            if (*p->s++ == close) return true;
            return false;
        }
    }
    if (c == '"') return jv_string(p);
    if (!strncmp(p->s, "true", 4)) {
        p->s += 4;
        return true;
    }
    if (!strncmp(p->s, "false", 5)) {
        p->s += 5;
        return true;
    }
    if (!strncmp(p->s, "null", 4)) {
        p->s += 4;
        return true;
    }
    return jv_number(p);
}

static bool json_valid(const char *s) {
    jv p = {s};
    if (!jv_value(&p, 0)) return false;
    jv_ws(&p);
    return *p.s == '\0';
}

KN_TEST(base_json, validator_rejects_bad_text) {
    const char *bad[] = {"",      "{",   "[1,]",     "{\"a\"}",  "{\"a\":1,}",
                         "01",    "1.",  "\"\x01\"", "\"\xff\"", "\"\xed\xa0\x80\"",
                         "[1] 2", "nul", "{1:2}",    "\"\\x\""};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        cr_assert(!json_valid(bad[k]), "accepted %s", bad[k]);
    cr_assert(json_valid(" {\"a\": [1, -2.5e-3, true, null, \"\\u00e9\xc3\xa9\"]} "));
}

/* ---------------------------------------------------------------- exact output */

static char *finish_ok(kn_json *j) {
    char *out = NULL;
    KN_ASSERT_OK(kn_json_finish(j, &out));
    cr_assert(out != NULL);
    cr_assert(json_valid(out), "invalid JSON written: %s", out);
    return out;
}

static void write_sample(kn_json *j) {
    kn_json_begin_object(j);
    kn_json_key(j, "name");
    kn_json_string(j, "kiln");
    kn_json_key(j, "n");
    kn_json_int(j, 3);
    kn_json_key(j, "xs");
    kn_json_begin_array(j);
    kn_json_number(j, 0.5);
    kn_json_bool(j, true);
    kn_json_null(j);
    kn_json_begin_object(j);
    kn_json_end_object(j);
    kn_json_begin_array(j);
    kn_json_end_array(j);
    kn_json_end_array(j);
    kn_json_key(j, "ok");
    kn_json_bool(j, false);
    kn_json_end_object(j);
}

KN_TEST(base_json, compact_output) {
    kn_json j;
    kn_json_init_string(&j, false);
    write_sample(&j);
    char *out = finish_ok(&j);
    cr_assert_str_eq(out, "{\"name\":\"kiln\",\"n\":3,\"xs\":[0.5,true,null,{},[]],\"ok\":false}");
    kn_free(out);
}

KN_TEST(base_json, pretty_output) {
    kn_json j;
    kn_json_init_string(&j, true);
    write_sample(&j);
    char *out = finish_ok(&j);
    cr_assert_str_eq(out, "{\n"
                          "  \"name\": \"kiln\",\n"
                          "  \"n\": 3,\n"
                          "  \"xs\": [\n"
                          "    0.5,\n"
                          "    true,\n"
                          "    null,\n"
                          "    {},\n"
                          "    []\n"
                          "  ],\n"
                          "  \"ok\": false\n"
                          "}\n");
    kn_free(out);
}

KN_TEST(base_json, a_scalar_document) {
    kn_json j;
    kn_json_init_string(&j, false);
    kn_json_int(&j, -7);
    char *out = finish_ok(&j);
    cr_assert_str_eq(out, "-7");
    kn_free(out);
}

static char *one_string(const char *s) {
    kn_json j;
    kn_json_init_string(&j, false);
    kn_json_string(&j, s);
    return finish_ok(&j);
}

KN_TEST(base_json, escapes) {
    struct {
        const char *in, *out;
    } c[] = {
        {"plain", "\"plain\""},
        {"q\"b\\s/", "\"q\\\"b\\\\s/\""},
        {"\n\t\r\b\f", "\"\\n\\t\\r\\b\\f\""},
        {"\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\""},
        {"", "\"\""},
        {"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80",
         "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\""},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        char *out = one_string(c[k].in);
        cr_assert_str_eq(out, c[k].out, "case %zu", k);
        kn_free(out);
    }
}

#define FFFD "\xef\xbf\xbd"
KN_TEST(base_json, invalid_utf8_becomes_replacement_characters) {
    struct {
        const char *in, *out;
    } c[] = {
        {"a\xff"
         "b",
         "\"a" FFFD "b\""},
        {"\x80", "\"" FFFD "\""},                            /* stray continuation */
        {"\xc3", "\"" FFFD "\""},                            /* truncated at the end */
        {"\xe2\x82x", "\"" FFFD "x\""},                      /* truncated, one U+FFFD */
        {"\xc0\xaf", "\"" FFFD FFFD "\""},                   /* overlong */
        {"\xe0\x80\xaf", "\"" FFFD FFFD FFFD "\""},          /* overlong 3-byte */
        {"\xed\xa0\x80", "\"" FFFD FFFD FFFD "\""},          /* a surrogate */
        {"\xf4\x90\x80\x80", "\"" FFFD FFFD FFFD FFFD "\""}, /* past U+10FFFF */
        {"\xf0\x9f\x98", "\"" FFFD "\""},                    /* truncated 4-byte */
        {"\xf0\x9f\x98\xc3\xa9", "\"" FFFD "\xc3\xa9\""},    /* then a valid one */
        {"\xef\xbf\xbf", "\"\xef\xbf\xbf\""},                /* U+FFFF is valid */
        {"\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""},        /* U+10FFFF is valid */
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        char *out = one_string(c[k].in);
        cr_assert_str_eq(out, c[k].out, "case %zu", k);
        kn_free(out);
    }
}

KN_TEST(base_json, keys_are_escaped_too) {
    kn_json j;
    kn_json_init_string(&j, false);
    kn_json_begin_object(&j);
    kn_json_key(&j, "a\"\n\xff");
    kn_json_int(&j, 1);
    kn_json_end_object(&j);
    char *out = finish_ok(&j);
    cr_assert_str_eq(out, "{\"a\\\"\\n" FFFD "\":1}");
    kn_free(out);
}

KN_TEST(base_json, numbers_round_trip) {
    double xs[] = {0.1,
                   1.0 / 3,
                   1e300,
                   -1e-300,
                   5e-324,
                   2.5,
                   123456789012345678.0,
                   0x1.fffffffffffffp1023,
                   -0.0,
                   100,
                   1e21,
                   0.30000000000000004};
    kn_json j;
    kn_json_init_string(&j, false);
    kn_json_begin_array(&j);
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) kn_json_number(&j, xs[k]);
    kn_json_number(&j, NAN);
    kn_json_number(&j, INFINITY);
    kn_json_number(&j, -INFINITY);
    kn_json_int(&j, INT64_MIN);
    kn_json_int(&j, INT64_MAX);
    kn_json_end_array(&j);
    char *out = finish_ok(&j);
    cr_assert(!strncmp(out, "[0.1,0.3333333333333333,1e+300,", 31), "shortest forms: %s", out);
    cr_assert(strstr(out, ",null,null,null,-9223372036854775808,9223372036854775807]") != NULL,
              "%s", out);
    const char *p = out + 1;
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        char *end;
        double back = strtod(p, &end);
        cr_assert(back == xs[k] && !signbit(back) == !signbit(xs[k]),
                  "value %zu: %.17g printed as %.*s", k, xs[k], (int)(end - p), p);
        p = end + 1;
    }
    kn_free(out);
}

/* ---------------------------------------------------------------- misuse */

typedef void (*writer_fn)(kn_json *);
static void w_value_for_key(kn_json *j) {
    kn_json_begin_object(j);
    kn_json_int(j, 1);
    kn_json_end_object(j);
}
static void w_key_in_array(kn_json *j) {
    kn_json_begin_array(j);
    kn_json_key(j, "k");
    kn_json_end_array(j);
}
static void w_key_at_top(kn_json *j) { kn_json_key(j, "k"); }
static void w_two_keys(kn_json *j) {
    kn_json_begin_object(j);
    kn_json_key(j, "a");
    kn_json_key(j, "b");
}
static void w_key_no_value(kn_json *j) {
    kn_json_begin_object(j);
    kn_json_key(j, "a");
    kn_json_end_object(j);
}
static void w_wrong_end(kn_json *j) {
    kn_json_begin_array(j);
    kn_json_end_object(j);
}
static void w_end_nothing(kn_json *j) { kn_json_end_array(j); }
static void w_unclosed(kn_json *j) {
    kn_json_begin_array(j);
    kn_json_begin_object(j);
}
static void w_two_docs(kn_json *j) {
    kn_json_int(j, 1);
    kn_json_int(j, 2);
}
static void w_empty(kn_json *j) { (void)j; }
static void w_null_string(kn_json *j) {
    kn_json_begin_array(j);
    kn_json_string(j, NULL);
    kn_json_end_array(j);
}
static void w_null_key(kn_json *j) {
    kn_json_begin_object(j);
    kn_json_key(j, NULL);
    kn_json_end_object(j);
}
static void w_too_deep(kn_json *j) {
    for (int d = 0; d < KN_JSON_MAX_DEPTH + 5; d++) kn_json_begin_array(j);
    for (int d = 0; d < KN_JSON_MAX_DEPTH + 5; d++) kn_json_end_array(j);
}

KN_TEST(base_json, misuse_is_reported_by_finish) {
    struct {
        writer_fn fn;
        const char *in_msg;
    } c[] = {
        {w_value_for_key, "key is expected"},
        {w_key_in_array, "outside an object"},
        {w_key_at_top, "outside an object"},
        {w_two_keys, "no value yet"},
        {w_key_no_value, "has no value"},
        {w_wrong_end, "an array is open"},
        {w_end_nothing, "nothing is open"},
        {w_unclosed, "2 containers still open"},
        {w_two_docs, "second top-level"},
        {w_empty, "nothing was written"},
        {w_null_string, "NULL"},
        {w_null_key, "NULL"},
        {w_too_deep, "nesting deeper"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
        for (int pretty = 0; pretty < 2; pretty++) {
            kn_json j;
            kn_json_init_string(&j, pretty);
            c[k].fn(&j);
            char *out = (char *)&j; /* must be reset to NULL */
            kn_clear_error();
            kn_status st = kn_json_finish(&j, &out);
            cr_assert_eq(st, KN_ERR_ARG, "case %zu: %s", k, kn_status_name(st));
            cr_assert_null(out, "case %zu: no text on error", k);
            cr_assert(strstr(kn_last_error(), c[k].in_msg) != NULL, "case %zu: message \"%s\"", k,
                      kn_last_error());
            cr_assert(!strncmp(kn_last_error(), "kn_json", 7), "case %zu names the function: %s", k,
                      kn_last_error());
        }
}

KN_TEST(base_json, deepest_allowed_nesting_works) {
    kn_json j;
    kn_json_init_string(&j, false);
    for (int d = 0; d < KN_JSON_MAX_DEPTH - 1; d++) kn_json_begin_array(&j);
    for (int d = 0; d < KN_JSON_MAX_DEPTH - 1; d++) kn_json_end_array(&j);
    char *out = finish_ok(&j);
    cr_assert_eq(strlen(out), 2 * (KN_JSON_MAX_DEPTH - 1));
    kn_free(out);
}

KN_TEST(base_json, file_mode) {
    FILE *f = tmpfile();
    cr_assert(f != NULL);
    kn_json j;
    kn_json_init_file(&j, f, false);
    write_sample(&j);
    KN_ASSERT_OK(kn_json_finish(&j, NULL));
    rewind(f);
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_assert_str_eq(buf, "{\"name\":\"kiln\",\"n\":3,\"xs\":[0.5,true,null,{},[]],\"ok\":false}");
    kn_json_init_file(&j, NULL, false);
    kn_json_int(&j, 1);
    KN_ASSERT_ERR(kn_json_finish(&j, NULL), KN_ERR_ARG);
}

KN_TEST(base_json, out_of_memory) {
    for (long k = 0; k < 3; k++) {
        kn_json j;
        kn_json_init_string(&j, false);
        kn_alloc_fail_after(k);
        kn_json_begin_array(&j);
        for (int i = 0; i < 2000; i++)
            kn_json_string(&j, "a string long enough to need several buffers");
        kn_json_end_array(&j);
        char *out = (char *)&j;
        KN_ASSERT_ERR(kn_json_finish(&j, &out), KN_ERR_OOM);
        cr_assert_null(out);
        kn_alloc_fail_after(-1);
    }
}

/* ---------------------------------------------------------------- random documents */

static uint32_t rnd_state = 1;
static uint32_t rnd(void) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return rnd_state;
}

static void random_value(kn_json *j, int depth) {
    unsigned kind = rnd() % (depth > 6 ? 5 : 7);
    char s[24];
    switch (kind) {
    case 0:
        kn_json_int(j, (int64_t)((uint64_t)rnd() << 32 | rnd()));
        break;
    case 1: {
        uint64_t u = (uint64_t)rnd() << 32 | rnd();
        double x;
        memcpy(&x, &u, 8); /* any bit pattern: NaN, Inf, subnormal... */
        kn_json_number(j, x);
        break;
    }
    case 2:
        kn_json_bool(j, rnd() & 1);
        break;
    case 3:
        kn_json_null(j);
        break;
    case 4: {
        int n = (int)(rnd() % 20);
        for (int k = 0; k < n; k++) s[k] = (char)(rnd() % 255 + 1); /* any bytes but NUL */
        s[n] = '\0';
        kn_json_string(j, s);
        break;
    }
    case 5:
    case 6: {
        bool obj = kind == 5;
        obj ? kn_json_begin_object(j) : kn_json_begin_array(j);
        int n = (int)(rnd() % 5);
        for (int k = 0; k < n; k++) {
            if (obj) {
                int m = (int)(rnd() % 8);
                for (int q = 0; q < m; q++) s[q] = (char)(rnd() % 255 + 1);
                s[m] = '\0';
                kn_json_key(j, s);
            }
            random_value(j, depth + 1);
        }
        obj ? kn_json_end_object(j) : kn_json_end_array(j);
        break;
    }
    }
}

KN_TEST(base_json, random_documents_are_valid) {
    for (int doc = 0; doc < 500; doc++) {
        kn_json j;
        kn_json_init_string(&j, doc & 1);
        kn_json_begin_array(&j);
        for (int k = 0; k < 4; k++) random_value(&j, 0);
        kn_json_end_array(&j);
        char *out = finish_ok(&j);
        kn_free(out);
    }
}
