/* json_read.c — a recursive-descent JSON reader (see json_impl.h for the contract).
 *
 * The grammar is RFC 8259's: value = object | array | string | number | true | false |
 * null. The reader works on a byte range (not a C string), so a header with no terminating
 * NUL, or with a NUL inside, is still read safely. Every node comes from one arena, so a
 * failing parse has nothing to clean up but the arena. */
#include <stdlib.h>
#include <string.h>

#include "data/json_impl.h"

#define KN_JV_MAX_DEPTH 64

typedef struct jp {
    kn_arena *arena;
    const char *s;
    size_t len, i;
    const char *what;
    int depth;
} jp;

static kn_status jp_fail(jp *p, const char *msg) {
    return kn_error(KN_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", p->what, p->i, msg);
}

static void jp_ws(jp *p) {
    while (p->i < p->len && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static kn_jv *jp_node(jp *p, kn_jv_type t) {
    kn_jv *v = kn_arena_alloc(p->arena, sizeof *v, 0);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->type = t;
    v->pos = p->i;
    return v;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool jp_hex4(jp *p, uint32_t *out) {
    if (p->len - p->i < 4) return false;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + (size_t)k]);
        if (h < 0) return false;
        x = x << 4 | (uint32_t)h;
    }
    p->i += 4;
    *out = x;
    return true;
}

static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string starting at the opening quote; the decoded text is never longer than the source. */
static kn_status jp_string(jp *p, const char **out, size_t *out_len) {
    p->i++; /* the quote */
    size_t start = p->i, end = start;
    while (end < p->len && p->s[end] != '"') end += (p->s[end] == '\\') ? 2 : 1;
    if (end >= p->len) { p->i = p->len; return jp_fail(p, "unterminated string"); }
    char *o = kn_arena_alloc(p->arena, end - start + 1, 1);
    if (!o) return kn_error(KN_ERR_OOM, "%s: out of memory reading JSON", p->what);
    size_t n = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) return jp_fail(p, "control character inside a string");
        if (c != '\\') { o[n++] = (char)c; p->i++; continue; }
        p->i++;
        char e = p->s[p->i++];
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!jp_hex4(p, &cp)) return jp_fail(p, "bad \\u escape (need 4 hex digits)");
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (p->len - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                    return jp_fail(p, "high surrogate without a low surrogate");
                p->i += 2;
                if (!jp_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) return jp_fail(p, "bad low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return jp_fail(p, "lone low surrogate");
            }
            n += utf8_put(o + n, cp);
            break;
        }
        default: p->i--; return jp_fail(p, "unknown escape");
        }
    }
    o[n] = '\0';
    p->i = end + 1;
    *out = o;
    *out_len = n;
    return KN_OK;
}

static bool isdig(char c) { return c >= '0' && c <= '9'; }

static kn_status jp_number(jp *p, kn_jv *v) {
    size_t start = p->i;
    if (p->i < p->len && p->s[p->i] == '-') p->i++;
    if (p->i >= p->len || !isdig(p->s[p->i])) return jp_fail(p, "expected a digit");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->len && isdig(p->s[p->i])) p->i++;
    if (p->i < p->len && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->len || !isdig(p->s[p->i])) return jp_fail(p, "expected a digit after '.'");
        while (p->i < p->len && isdig(p->s[p->i])) p->i++;
    }
    if (p->i < p->len && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->len && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->len || !isdig(p->s[p->i])) return jp_fail(p, "expected a digit in the exponent");
        while (p->i < p->len && isdig(p->s[p->i])) p->i++;
    }
    size_t n = p->i - start;
    char *t = kn_arena_alloc(p->arena, n + 1, 1);
    if (!t) return kn_error(KN_ERR_OOM, "%s: out of memory reading JSON", p->what);
    memcpy(t, p->s + start, n);
    t[n] = '\0';
    v->str = t;
    v->str_len = n;
    v->number = strtod(t, NULL);
    return KN_OK;
}

static kn_status jp_value(jp *p, kn_jv **out);

/* Elements of an array or members of an object, after the opening bracket. */
static kn_status jp_container(jp *p, kn_jv *v, bool object) {
    char close = object ? '}' : ']';
    if (++p->depth > KN_JV_MAX_DEPTH) return jp_fail(p, "nested deeper than 64 levels");
    p->i++;
    jp_ws(p);
    kn_jv **tail = &v->child;
    if (p->i < p->len && p->s[p->i] == close) { p->i++; p->depth--; return KN_OK; }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        if (object) {
            jp_ws(p);
            if (p->i >= p->len || p->s[p->i] != '"') return jp_fail(p, "expected a member name in quotes");
            KN_TRY(jp_string(p, &key, &key_len));
            jp_ws(p);
            if (p->i >= p->len || p->s[p->i] != ':') return jp_fail(p, "expected ':' after a member name");
            p->i++;
        }
        kn_jv *e;
        KN_TRY(jp_value(p, &e));
        e->key = key;
        e->key_len = key_len;
        *tail = e;
        tail = &e->next;
        v->count++;
        jp_ws(p);
        if (p->i < p->len && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->len && p->s[p->i] == close) { p->i++; break; }
        return jp_fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return KN_OK;
}

static kn_status jp_literal(jp *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->i < n || memcmp(p->s + p->i, word, n) != 0) return jp_fail(p, "expected a value");
    p->i += n;
    return KN_OK;
}

static kn_status jp_value(jp *p, kn_jv **out) {
    jp_ws(p);
    if (p->i >= p->len) return jp_fail(p, "unexpected end of text, expected a value");
    char c = p->s[p->i];
    kn_jv_type t = c == '{' ? KN_JV_OBJECT : c == '[' ? KN_JV_ARRAY : c == '"' ? KN_JV_STRING
                 : (c == 't' || c == 'f') ? KN_JV_BOOL : c == 'n' ? KN_JV_NULL : KN_JV_NUMBER;
    kn_jv *v = jp_node(p, t);
    if (!v) return kn_error(KN_ERR_OOM, "%s: out of memory reading JSON", p->what);
    switch (t) {
    case KN_JV_OBJECT: KN_TRY(jp_container(p, v, true)); break;
    case KN_JV_ARRAY: KN_TRY(jp_container(p, v, false)); break;
    case KN_JV_STRING: KN_TRY(jp_string(p, &v->str, &v->str_len)); break;
    case KN_JV_BOOL:
        v->boolean = c == 't';
        KN_TRY(jp_literal(p, v->boolean ? "true" : "false"));
        break;
    case KN_JV_NULL: KN_TRY(jp_literal(p, "null")); break;
    case KN_JV_NUMBER: KN_TRY(jp_number(p, v)); break;
    }
    *out = v;
    return KN_OK;
}

kn_status kn_jv_parse(kn_arena *arena, const char *text, size_t len, const char *what, kn_jv **out) {
    if (!arena || (len && !text) || !out) return kn_error(KN_ERR_ARG, "kn_jv_parse: NULL argument");
    jp p = {.arena = arena, .s = text, .len = len, .what = what ? what : "<json>"};
    kn_jv *v;
    KN_TRY(jp_value(&p, &v));
    jp_ws(&p);
    if (p.i != p.len) return jp_fail(&p, "text after the JSON value");
    *out = v;
    return KN_OK;
}

const kn_jv *kn_jv_get(const kn_jv *v, const char *key) {
    if (!v || v->type != KN_JV_OBJECT) return NULL;
    size_t n = strlen(key);
    for (const kn_jv *m = v->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
    return NULL;
}

bool kn_jv_u64(const kn_jv *v, uint64_t *out) {
    if (!v || v->type != KN_JV_NUMBER || v->str_len == 0 || v->str_len > 20) return false;
    uint64_t x = 0;
    for (size_t k = 0; k < v->str_len; k++) {
        char c = v->str[k];
        if (!isdig(c)) return false;
        uint64_t d = (uint64_t)(c - '0');
        if (x > (UINT64_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    *out = x;
    return true;
}
