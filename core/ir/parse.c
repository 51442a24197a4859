/* parse.c — the parser of the IR text format (kiln/ir.h describes the format).
 *
 * A hand-written recursive-descent parser over a byte buffer that need not end in NUL.
 * It checks syntax and names only: ops exist, operand counts match arity, attributes are
 * ones the op takes (each at most once, required ones present), values are defined before
 * use and defined once, dtypes and numbers are well formed. Types and shapes are the
 * verifier's job. Every error is KN_ERR_FORMAT with "line:column: expected ..., got ...",
 * and the parser never reads past the buffer (it is fuzzed: core/fuzz/). Value names are
 * resolved with a small open-addressing hash table. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_impl.h"

typedef struct name_slot { const char *s; size_t len; int32_t id; } name_slot;

typedef struct parser {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;
    kn_graph *g;
    name_slot *tab;   /* open addressing, cap a power of two, empty slots have s == NULL */
    size_t cap, used;
    kn_status st;
} parser;

static kn_status perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kn_status perr(parser *p, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = kn_error(KN_ERR_FORMAT, "kn_graph_parse: %d:%d: %s", p->line, (int)(p->pos - p->line_start) + 1, msg);
    return p->st;
}

static int peek(const parser *p) { return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1; }

/* What stands at the cursor, for messages: "'['", "end of line", "end of input". */
static const char *got(const parser *p, char *buf, size_t size) {
    int c = peek(p);
    if (c < 0) return "end of input";
    if (c == '\n') return "end of line";
    if (c >= 0x21 && c < 0x7f) {
        size_t k = 0;
        while (p->pos + k < p->n && k < 16) {
            int d = (unsigned char)p->s[p->pos + k];
            if (d < 0x21 || d >= 0x7f || (k > 0 && strchr(",:{}[]=%\"", d))) break;
            k++;
        }
        snprintf(buf, size, "'%.*s'", (int)k, p->s + p->pos);
    } else {
        snprintf(buf, size, "byte 0x%02x", (unsigned)c);
    }
    return buf;
}

static kn_status expected(parser *p, const char *what) {
    char b[40];
    return perr(p, "expected %s, got %s", what, got(p, b, sizeof b));
}

/* Skip blanks and a comment, not the newline. */
static void skip_ws(parser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\r')) p->pos++;
    if (peek(p) == '#')
        while (p->pos < p->n && p->s[p->pos] != '\n') p->pos++;
}

static bool accept(parser *p, char c) {
    skip_ws(p);
    if (peek(p) == (unsigned char)c) { p->pos++; return true; }
    return false;
}

static kn_status expect(parser *p, char c, const char *what) {
    return accept(p, c) ? KN_OK : expected(p, what);
}

static bool is_ident(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'; }

/* An identifier at the cursor (after blanks): its start and length (0 when none). */
static size_t ident(parser *p, const char **start) {
    skip_ws(p);
    *start = p->s + p->pos;
    size_t k = 0;
    while (p->pos < p->n && is_ident((unsigned char)p->s[p->pos])) { p->pos++; k++; }
    return k;
}

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static name_slot *lookup(parser *p, const char *s, size_t n) {
    if (!p->cap) return NULL;
    for (size_t i = hash(s, n) & (p->cap - 1);; i = (i + 1) & (p->cap - 1)) {
        name_slot *e = &p->tab[i];
        if (!e->s) return e;
        if (e->len == n && !memcmp(e->s, s, n)) return e;
    }
}

static kn_status define(parser *p, const char *s, size_t n, int32_t id) {
    if (2 * (p->used + 1) > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        name_slot *old = p->tab;
        size_t oldcap = p->cap;
        p->tab = kn_calloc(cap, sizeof *p->tab);
        if (!p->tab) { p->tab = old; return p->st = kn_error(KN_ERR_OOM, "kn_graph_parse: out of memory"); }
        p->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].s) *lookup(p, old[i].s, old[i].len) = old[i];
        kn_free(old);
    }
    name_slot *e = lookup(p, s, n);
    e->s = s;
    e->len = n;
    e->id = id;
    p->used++;
    return KN_OK;
}

/* "%name": the name's start and length. */
static kn_status value_name(parser *p, const char **s, size_t *n) {
    if (!accept(p, '%')) return expected(p, "a value '%name'");
    size_t save = p->pos;
    *n = ident(p, s);
    if (*n == 0 || p->pos != save + *n) { p->pos = save; return expected(p, "a value name after '%'"); }
    return KN_OK;
}

static kn_status use_value(parser *p, int32_t *id) {
    const char *s;
    size_t n, at = p->pos;
    KN_TRY(value_name(p, &s, &n));
    name_slot *e = lookup(p, s, n);
    if (!e || !e->s) {
        p->pos = at;
        skip_ws(p);
        return perr(p, "value %%%.*s is not defined before use", (int)(n > 40 ? 40 : n), s);
    }
    *id = e->id;
    return KN_OK;
}

static kn_status integer(parser *p, int64_t *out) {
    skip_ws(p);
    bool neg = false;
    size_t at = p->pos;
    if (peek(p) == '-' || peek(p) == '+') { neg = peek(p) == '-'; p->pos++; }
    if (peek(p) < '0' || peek(p) > '9') { p->pos = at; return expected(p, "an integer"); }
    uint64_t v = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        uint64_t d = (uint64_t)(peek(p) - '0');
        if (v > (UINT64_MAX - d) / 10) { p->pos = at; return perr(p, "integer out of range"); }
        v = v * 10 + d;
        p->pos++;
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) { p->pos = at; return perr(p, "integer out of range"); }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    if (is_ident(peek(p))) return expected(p, "',', ']' or '}' after the integer");
    return KN_OK;
}

static kn_status number(parser *p, double *out) {
    skip_ws(p);
    char buf[72];
    size_t k = 0, at = p->pos;
    while (p->pos < p->n && k < sizeof buf - 1 && strchr("0123456789+-.eEinfatyINFATY", p->s[p->pos]) && p->s[p->pos]) buf[k++] = p->s[p->pos++];
    buf[k] = '\0';
    char *end;
    errno = 0;
    double v = k ? strtod(buf, &end) : 0;
    if (k == 0 || *end != '\0' || is_ident(peek(p))) { p->pos = at; return expected(p, "a number"); }
    *out = v;
    return KN_OK;
}

static kn_status int_list(parser *p, int64_t *v, int *count, bool nonneg) {
    *count = 0;
    KN_TRY(expect(p, '[', "'['"));
    if (accept(p, ']')) return KN_OK;
    do {
        if (*count == KN_MAX_DIMS) return perr(p, "more than %d entries in a list", KN_MAX_DIMS);
        size_t at = p->pos;
        KN_TRY(integer(p, &v[*count]));
        if (nonneg && v[*count] < 0) { p->pos = at; skip_ws(p); return perr(p, "dimension %lld is negative", (long long)v[*count]); }
        (*count)++;
    } while (accept(p, ','));
    return expect(p, ']', "',' or ']'");
}

static kn_status dtype(parser *p, kn_dtype *dt) {
    const char *s;
    size_t at = p->pos, n = ident(p, &s);
    char buf[16];
    if (n == 0) return expected(p, "a dtype (f32, f64, bf16, ...)");
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 15 ? n : 15), s);
    if (n >= 15 || kn_dtype_from_name(buf, dt) != KN_OK) {
        kn_clear_error();
        p->pos = at;
        skip_ws(p);
        return perr(p, "unknown dtype '%.*s'", (int)(n > 20 ? 20 : n), s);
    }
    return KN_OK;
}

/* A pointwise function by its name (kiln/pointwise.def): gelu, relu, ... */
static kn_status unary_fn(parser *p, int32_t *fn) {
    const char *s;
    size_t at = p->pos, n = ident(p, &s);
    if (n == 0) return expected(p, "a pointwise function's name (gelu, relu, ...)");
    for (int i = 0; i < KN_UNARY_COUNT; i++) {
        const char *name = kn_unary_op_name((kn_unary_op)i);
        if (strlen(name) == n && !memcmp(name, s, n)) { *fn = i; return KN_OK; }
    }
    p->pos = at;
    skip_ws(p);
    return perr(p, "unknown pointwise function '%.*s'", (int)(n > 20 ? 20 : n), s);
}

static kn_status attr_value(parser *p, kn_attrs *a, kn_attr_id id) {
    switch (kn_attr_metas[id].kind) {
    case KN_AK_INT: return integer(p, kn_attr_int(a, id));
    case KN_AK_F64: return number(p, kn_attr_f64(a, id));
    case KN_AK_INTS: { int *c; int64_t *v = kn_attr_ints(a, id, &c); return int_list(p, v, c, false); }
    case KN_AK_DTYPE: return dtype(p, &a->dtype);
    case KN_AK_FN: return unary_fn(p, &a->fn);
    case KN_AK_STR: {
        if (!accept(p, '"')) return expected(p, "a string '\"...\"'");
        size_t k = 0;
        while (p->pos < p->n && p->s[p->pos] != '"' && p->s[p->pos] != '\n') {
            unsigned char c = (unsigned char)p->s[p->pos];
            if (c < 0x20 || c == '\\') return perr(p, "a string may not hold control characters or backslashes");
            if (k == KN_NAME_MAX - 1) return perr(p, "a name longer than %d characters", KN_NAME_MAX - 1);
            a->name[k++] = (char)c;
            p->pos++;
        }
        a->name[k] = '\0';
        if (!accept(p, '"')) return expected(p, "the closing '\"'");
        return KN_OK;
    }
    }
    return KN_OK;
}

static kn_status attrs(parser *p, const kn_op_info *info, kn_attrs *a) {
    uint32_t seen = 0;
    if (accept(p, '{')) {
        if (!accept(p, '}')) {
            do {
                const char *s;
                size_t at = p->pos, n = ident(p, &s);
                if (n == 0) return expected(p, "an attribute name");
                int id = -1;
                for (int i = 0; i < KN_ATTR_COUNT; i++)
                    if (strlen(kn_attr_metas[i].name) == n && !memcmp(kn_attr_metas[i].name, s, n)) id = i;
                if (id < 0 || !((info->req_attrs | info->opt_attrs) & (1u << id))) {
                    p->pos = at;
                    skip_ws(p);
                    return perr(p, "%s takes no attribute '%.*s'", info->name, (int)(n > 20 ? 20 : n), s);
                }
                if (seen & (1u << id)) { p->pos = at; skip_ws(p); return perr(p, "attribute '%s' given twice", kn_attr_metas[id].name); }
                seen |= 1u << id;
                KN_TRY(expect(p, '=', "'=' after the attribute name"));
                KN_TRY(attr_value(p, a, (kn_attr_id)id));
            } while (accept(p, ','));
            KN_TRY(expect(p, '}', "',' or '}'"));
        }
    }
    uint32_t missing = info->req_attrs & ~seen;
    for (int i = 0; i < KN_ATTR_COUNT; i++)
        if (missing & (1u << i)) return perr(p, "%s needs attribute '%s'", info->name, kn_attr_metas[i].name);
    return KN_OK;
}

static kn_status type(parser *p, kn_type *t) {
    KN_TRY(dtype(p, &t->dtype));
    return int_list(p, t->shape, &t->ndim, true);
}

static kn_status end_of_line(parser *p) {
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] != '\n') return expected(p, "the end of the line");
    return KN_OK;
}

static kn_status node_line(parser *p) {
    const char *name;
    size_t nlen, at = p->pos;
    KN_TRY(value_name(p, &name, &nlen));
    name_slot *e = lookup(p, name, nlen);
    if (e && e->s) { p->pos = at; return perr(p, "value %%%.*s is defined twice", (int)(nlen > 40 ? 40 : nlen), name); }
    KN_TRY(expect(p, '=', "'=' after the value name"));
    const char *opname;
    size_t olen = ident(p, &opname);
    if (olen == 0) return expected(p, "an op name");
    kn_op op = kn_op_from_name(opname, olen);
    if (op == KN_OP_COUNT) {
        p->pos -= olen;
        return perr(p, "unknown op '%.*s'", (int)(olen > 30 ? 30 : olen), opname);
    }
    const kn_op_info *info = kn_op_get(op);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.attrs = kn_attrs_default();
    n.scope = KN_SCOPE_NONE; /* the text format carries no scopes */
    skip_ws(p);
    if (peek(p) == '%') {
        do {
            if (n.nin == info->arity) return perr(p, "%s takes %d operand%s, got more", info->name, info->arity, info->arity == 1 ? "" : "s");
            KN_TRY(use_value(p, &n.in[n.nin]));
            n.nin++;
        } while (accept(p, ','));
    }
    if (n.nin != info->arity)
        return perr(p, "%s takes %d operand%s, got %d", info->name, info->arity, info->arity == 1 ? "" : "s", n.nin);
    KN_TRY(attrs(p, info, &n.attrs));
    KN_TRY(expect(p, ':', "':' before the type"));
    KN_TRY(type(p, &n.type));
    KN_TRY(end_of_line(p));
    int32_t id;
    if (kn_graph_add_node(p->g, &n, &id) != KN_OK) return p->st = KN_ERR_OOM;
    return define(p, name, nlen, id);
}

static kn_status output_line(parser *p) {
    skip_ws(p);
    if (peek(p) == '%') {
        do {
            int32_t id;
            KN_TRY(use_value(p, &id));
            if (kn_graph_add_output(p->g, id) != KN_OK) return p->st = KN_ERR_OOM;
        } while (accept(p, ','));
    }
    return end_of_line(p);
}

kn_status kn_graph_parse(const char *text, size_t len, kn_graph **out) {
    if (!out || (!text && len)) return kn_error(KN_ERR_ARG, "kn_graph_parse: NULL argument");
    parser p = {.s = text, .n = len, .line = 1};
    KN_TRY(kn_graph_new(&p.g));
    bool have_output = false;
    while (p.st == KN_OK && p.pos < p.n) {
        skip_ws(&p);
        if (peek(&p) == '\n') { p.pos++; p.line++; p.line_start = p.pos; continue; }
        if (peek(&p) < 0) break;
        if (have_output) { perr(&p, "nothing may follow the output line"); break; }
        const char *w;
        size_t at = p.pos, k = ident(&p, &w);
        if (k == 6 && !memcmp(w, "output", 6)) {
            if (output_line(&p) != KN_OK) break;
            have_output = true;
        } else {
            p.pos = at;
            if (peek(&p) != '%') { expected(&p, "a node '%id = op ...' or 'output'"); break; }
            if (node_line(&p) != KN_OK) break;
        }
    }
    kn_free(p.tab);
    if (p.st != KN_OK) {
        kn_graph_free(p.g);
        return p.st;
    }
    *out = p.g;
    return KN_OK;
}
