/* print.c — the text form of a graph (format: the overview of kiln/ir.h).
 *
 * One line per node, `%ID = OP OPERANDS {ATTRS} : TYPE`, then `output ...`. The printer
 * is canonical: ids are the node indices, attributes come in table order (ORDER ATTR),
 * required ones always, optional ones only when they differ from the default, floats
 * with %.17g (which reads back to the same double). So text printed from a parsed graph is
 * byte-for-byte the text that was parsed, once it has been through the printer once. */
#include <stdarg.h>
#include <string.h>

#include "ir/ir_impl.h"

void kn_sbuf_printf(kn_sbuf *sb, const char *fmt, ...) {
    if (sb->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = sb->cap - sb->len;
        int n = vsnprintf(sb->s ? sb->s + sb->len : NULL, sb->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { sb->oom = true; return; }
        if (sb->s && (size_t)n < room) { sb->len += (size_t)n; return; }
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap < sb->len + (size_t)n + 1) cap *= 2;
        char *s = kn_realloc(sb->s, cap);
        if (!s) { sb->oom = true; return; }
        sb->s = s;
        sb->cap = cap;
    }
}

static void print_attr(kn_sbuf *sb, const kn_attrs *a0, kn_attr_id id) {
    kn_attrs *a = (kn_attrs *)a0; /* the accessors are not const; nothing is written */
    kn_sbuf_printf(sb, "%s=", kn_attr_metas[id].name);
    switch (kn_attr_metas[id].kind) {
    case KN_AK_INT: kn_sbuf_printf(sb, "%lld", (long long)*kn_attr_int(a, id)); break;
    case KN_AK_F64: kn_sbuf_printf(sb, "%.17g", *kn_attr_f64(a, id)); break;
    case KN_AK_INTS: {
        int *c;
        int64_t *v = kn_attr_ints(a, id, &c);
        kn_sbuf_printf(sb, "[");
        for (int i = 0; i < *c && i < KN_MAX_DIMS; i++) kn_sbuf_printf(sb, "%s%lld", i ? "," : "", (long long)v[i]);
        kn_sbuf_printf(sb, "]");
        break;
    }
    case KN_AK_DTYPE: kn_sbuf_printf(sb, "%s", kn_dtype_name(a->dtype)); break;
    case KN_AK_STR: kn_sbuf_printf(sb, "\"%.*s\"", KN_NAME_MAX - 1, a->name); break;
    case KN_AK_FN: kn_sbuf_printf(sb, "%s", kn_unary_op_name((kn_unary_op)a->fn)); break;
    }
}

void kn_node_format(kn_sbuf *sb, const kn_graph *g, int32_t id) {
    const kn_node *n = &g->nodes[id];
    const kn_op_info *info = kn_op_get(n->op);
    char tb[160];
    kn_sbuf_printf(sb, "%%%d = %s", id, kn_op_name(n->op));
    for (int i = 0; i < n->nin && i < KN_MAX_OPERANDS; i++) kn_sbuf_printf(sb, "%s%%%d", i ? ", " : " ", n->in[i]);
    bool first = true;
    for (int i = 0; i < KN_ATTR_COUNT; i++) {
        bool req = info && (info->req_attrs & (1u << i));
        if (!req && kn_attr_is_default(&n->attrs, (kn_attr_id)i)) continue;
        kn_sbuf_printf(sb, "%s", first ? " {" : ", ");
        print_attr(sb, &n->attrs, (kn_attr_id)i);
        first = false;
    }
    if (!first) kn_sbuf_printf(sb, "}");
    kn_sbuf_printf(sb, " : %s", kn_type_str(&n->type, tb, sizeof tb));
}

static kn_status format_graph(const kn_graph *g, kn_sbuf *sb) {
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_node_format(sb, g, i);
        kn_sbuf_printf(sb, "\n");
    }
    if (g->noutputs > 0) {
        kn_sbuf_printf(sb, "output");
        for (int i = 0; i < g->noutputs; i++) kn_sbuf_printf(sb, "%s%%%d", i ? ", " : " ", g->outputs[i]);
        kn_sbuf_printf(sb, "\n");
    }
    if (sb->oom) {
        kn_free(sb->s);
        sb->s = NULL;
        return kn_error(KN_ERR_OOM, "kn_graph_print: out of memory");
    }
    if (!sb->s) kn_sbuf_printf(sb, "%s", "");
    return sb->oom ? kn_error(KN_ERR_OOM, "kn_graph_print: out of memory") : KN_OK;
}

kn_status kn_graph_to_string(const kn_graph *g, char **out) {
    if (!g || !out) return kn_error(KN_ERR_ARG, "kn_graph_to_string: NULL argument");
    kn_sbuf sb = {0};
    KN_TRY(format_graph(g, &sb));
    *out = sb.s;
    return KN_OK;
}

kn_status kn_graph_print(FILE *f, const kn_graph *g) {
    if (!f || !g) return kn_error(KN_ERR_ARG, "kn_graph_print: NULL argument");
    char *s = NULL;
    KN_TRY(kn_graph_to_string(g, &s));
    size_t n = strlen(s);
    bool ok = fwrite(s, 1, n, f) == n;
    kn_free(s);
    return ok ? KN_OK : kn_error(KN_ERR_IO, "kn_graph_print: write failed");
}
