/* safetensors.c — checkpoints in the safetensors format, written and validated.
 *
 * The format (https://github.com/huggingface/safetensors), all little-endian:
 *   u64 N                 length of the JSON header in bytes
 *   N bytes               {"__metadata__": {"key": "value", ...},
 *                          "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 *                         padded with spaces so the data starts 8-byte aligned
 *   data                  the tensors' bytes; data_offsets are relative to the data start
 * The reader checks what PyTorch's safetensors checks: the header is JSON, every entry has a
 * known dtype, a shape of non-negative integers and [begin, end] offsets with
 * end - begin == numel * dtype size, and the entries tile the data exactly (no gaps, no
 * overlaps, nothing left over). Metadata values must be strings.
 *
 * The writer goes through a temporary file renamed over the target, so a crash while
 * saving never leaves a half-written checkpoint where a good one was. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/json_impl.h"
#include "kiln/data.h"

#define KN_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* ORDER DTYPE */
static const char *const k_st_names[KN_DT_COUNT] = {"F32", "F64", "F16", "BF16", "I32", "I64", "U8", "BOOL"};

const char *kn_st_dtype_name(kn_dtype dt) { return kn_dtype_valid(dt) ? k_st_names[dt] : NULL; }

static bool st_dtype_from(const char *s, kn_dtype *out) {
    for (int d = 0; d < KN_DT_COUNT; d++)
        if (!strcmp(s, k_st_names[d])) { *out = (kn_dtype)d; return true; }
    return false;
}

/* numel * dtype size, false on overflow. */
static bool st_nbytes(kn_dtype dt, int ndim, const int64_t *shape, uint64_t *out) {
    uint64_t n = kn_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        if (shape[i] && n > UINT64_MAX / (uint64_t)shape[i]) return false;
        n *= (uint64_t)shape[i];
    }
    *out = n;
    return true;
}

/* ---------------------------------------------------------------- writer */

kn_status kn_safetensors_write(const char *path, int n, const kn_st_tensor *ts, int n_meta, const kn_st_meta *meta) {
    if (!path || n < 0 || n_meta < 0 || (n && !ts) || (n_meta && !meta))
        return kn_error(KN_ERR_ARG, "kn_safetensors_write: bad arguments (n %d, n_meta %d)", n, n_meta);
    for (int i = 0; i < n; i++) {
        uint64_t want = 0;
        if (!ts[i].name || !ts[i].name[0] || !strcmp(ts[i].name, "__metadata__"))
            return kn_error(KN_ERR_ARG, "kn_safetensors_write: tensor %d has an empty or reserved name", i);
        if (!kn_dtype_valid(ts[i].dtype) || ts[i].ndim < 0 || ts[i].ndim > KN_MAX_DIMS ||
            !st_nbytes(ts[i].dtype, ts[i].ndim, ts[i].shape, &want))
            return kn_error(KN_ERR_ARG, "kn_safetensors_write: tensor '%s' has a bad dtype or shape", ts[i].name);
        if (want != ts[i].nbytes || (want && !ts[i].data))
            return kn_error(KN_ERR_ARG, "kn_safetensors_write: tensor '%s' needs %llu bytes, given %llu", ts[i].name,
                            (unsigned long long)want, (unsigned long long)ts[i].nbytes);
        for (int k = 0; k < i; k++)
            if (!strcmp(ts[k].name, ts[i].name))
                return kn_error(KN_ERR_ARG, "kn_safetensors_write: two tensors are named '%s'", ts[i].name);
    }
    kn_json j;
    kn_json_init_string(&j, false);
    kn_json_begin_object(&j);
    if (n_meta) {
        kn_json_key(&j, "__metadata__");
        kn_json_begin_object(&j);
        for (int i = 0; i < n_meta; i++) {
            kn_json_key(&j, meta[i].key);
            kn_json_string(&j, meta[i].value);
        }
        kn_json_end_object(&j);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        kn_json_key(&j, ts[i].name);
        kn_json_begin_object(&j);
        kn_json_key(&j, "dtype");
        kn_json_string(&j, k_st_names[ts[i].dtype]);
        kn_json_key(&j, "shape");
        kn_json_begin_array(&j);
        for (int d = 0; d < ts[i].ndim; d++) kn_json_int(&j, ts[i].shape[d]);
        kn_json_end_array(&j);
        kn_json_key(&j, "data_offsets");
        kn_json_begin_array(&j);
        kn_json_int(&j, (int64_t)off);
        kn_json_int(&j, (int64_t)(off + ts[i].nbytes));
        kn_json_end_array(&j);
        kn_json_end_object(&j);
        off += ts[i].nbytes;
    }
    kn_json_end_object(&j);
    char *hdr;
    kn_status st = kn_json_finish(&j, &hdr);
    if (st != KN_OK) return kn_error(st, "kn_safetensors_write: building the header: %s", kn_last_error());
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;

    size_t plen = strlen(path);
    char *tmp = kn_malloc(plen + 8);
    if (!tmp) { kn_free(hdr); return kn_error(KN_ERR_OOM, "kn_safetensors_write: out of memory"); }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = kn_error(KN_ERR_IO, "kn_safetensors_write: cannot create '%s': %s", tmp, strerror(errno));
        kn_free(hdr); kn_free(tmp);
        return st;
    }
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t k = hlen; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++)
        ok = ts[i].nbytes == 0 || fwrite(ts[i].data, 1, ts[i].nbytes, f) == ts[i].nbytes;
    if (fclose(f) != 0) ok = false;
    kn_free(hdr);
    if (!ok || rename(tmp, path) != 0) {
        st = kn_error(KN_ERR_IO, "kn_safetensors_write: error writing '%s': %s", path, strerror(errno));
        remove(tmp);
        kn_free(tmp);
        return st;
    }
    kn_free(tmp);
    return KN_OK;
}

/* ---------------------------------------------------------------- reader */

typedef struct st_entry {
    kn_st_tensor t;
    uint64_t begin, end;
} st_entry;

static int st_cmp_begin(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static char *st_dup(const char *s, size_t n) {
    char *d = kn_malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = '\0'; }
    return d;
}

void kn_safetensors_free(kn_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_tensors; i++) kn_free((char *)st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) { kn_free((char *)st->meta[i].key); kn_free((char *)st->meta[i].value); }
    kn_free(st->tensors);
    kn_free(st->meta);
    kn_free(st->buf);
    memset(st, 0, sizeof *st);
}

/* One tensor entry of the header into e (names are checked by the caller). */
static kn_status st_entry_read(const kn_jv *m, const char *what, uint64_t data_len, st_entry *e) {
    const char *name = m->key;
    if (m->type != KN_JV_OBJECT) return kn_error(KN_ERR_FORMAT, "%s: entry '%s' is not a JSON object", what, name);
    const kn_jv *dt = kn_jv_get(m, "dtype"), *sh = kn_jv_get(m, "shape"), *of = kn_jv_get(m, "data_offsets");
    if (!dt || dt->type != KN_JV_STRING || !st_dtype_from(dt->str, &e->t.dtype))
        return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': missing or unknown dtype%s%s", what, name,
                        dt && dt->type == KN_JV_STRING ? " " : "", dt && dt->type == KN_JV_STRING ? dt->str : "");
    if (!sh || sh->type != KN_JV_ARRAY || sh->count > KN_MAX_DIMS)
        return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': shape must be an array of at most %d integers", what, name,
                        KN_MAX_DIMS);
    e->t.ndim = sh->count;
    int d = 0;
    for (const kn_jv *x = sh->child; x; x = x->next, d++) {
        uint64_t v;
        if (!kn_jv_u64(x, &v) || v > (uint64_t)INT64_MAX)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer", what, name, d);
        e->t.shape[d] = (int64_t)v;
    }
    if (!of || of->type != KN_JV_ARRAY || of->count != 2 || !kn_jv_u64(of->child, &e->begin) ||
        !kn_jv_u64(of->child->next, &e->end))
        return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': data_offsets must be [begin, end] integers", what, name);
    uint64_t want = 0;
    if (e->end < e->begin || e->end > data_len)
        return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes", what,
                        name, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)data_len);
    if (!st_nbytes(e->t.dtype, e->t.ndim, e->t.shape, &want) || want != e->end - e->begin)
        return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes but dtype and shape need %llu",
                        what, name, (unsigned long long)(e->end - e->begin), (unsigned long long)want);
    e->t.nbytes = want;
    return KN_OK;
}

/* Parse buf (owned by st from here on) into st. */
static kn_status st_parse_owned(kn_safetensors *st, const char *what) {
    const uint8_t *buf = st->buf;
    size_t len = st->len;
    if (len < 8) return kn_error(KN_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file", what, len);
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)buf[b] << (8 * b);
    if (n > KN_ST_MAX_HEADER || n > len - 8)
        return kn_error(KN_ERR_FORMAT, "%s: header length %llu does not fit the file (%zu bytes)", what,
                        (unsigned long long)n, len);
    if (n < 2 || buf[8] != '{') return kn_error(KN_ERR_FORMAT, "%s: the header does not start with '{'", what);
    kn_arena arena;
    kn_arena_init(&arena, 0);
    kn_jv *root;
    char hwhat[300];
    snprintf(hwhat, sizeof hwhat, "%s: header", what);
    kn_status s = kn_jv_parse(&arena, (const char *)buf + 8, (size_t)n, hwhat, &root);
    if (s != KN_OK) { kn_arena_free(&arena); return s; }
    if (root->type != KN_JV_OBJECT) {
        kn_arena_free(&arena);
        return kn_error(KN_ERR_FORMAT, "%s: the header is not a JSON object", what);
    }
    uint64_t data_len = len - 8 - n;
    const uint8_t *data = buf + 8 + n;
    st_entry *es = kn_calloc((size_t)root->count + 1, sizeof *es);
    const kn_jv *md = kn_jv_get(root, "__metadata__");
    int n_meta_max = md && md->type == KN_JV_OBJECT ? md->count : 0;
    st->meta = kn_calloc((size_t)n_meta_max + 1, sizeof *st->meta);
    if (!es || !st->meta) { s = kn_error(KN_ERR_OOM, "%s: out of memory", what); goto done; }
    int ne = 0;
    for (const kn_jv *m = root->child; m; m = m->next) {
        if (strlen(m->key) != m->key_len || m->key_len == 0) {
            s = kn_error(KN_ERR_FORMAT, "%s: a tensor name is empty or contains a NUL byte", what);
            goto done;
        }
        for (const kn_jv *p = root->child; p != m; p = p->next)
            if (!strcmp(p->key, m->key)) {
                s = kn_error(KN_ERR_FORMAT, "%s: the name '%s' appears twice in the header", what, m->key);
                goto done;
            }
        if (!strcmp(m->key, "__metadata__")) {
            if (m->type != KN_JV_OBJECT) { s = kn_error(KN_ERR_FORMAT, "%s: __metadata__ is not an object", what); goto done; }
            for (const kn_jv *kv = m->child; kv; kv = kv->next) {
                if (kv->type != KN_JV_STRING) {
                    s = kn_error(KN_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", what, kv->key);
                    goto done;
                }
                kn_st_meta *me = &st->meta[st->n_meta++];
                me->key = st_dup(kv->key, kv->key_len);
                me->value = st_dup(kv->str, kv->str_len);
                if (!me->key || !me->value) { s = kn_error(KN_ERR_OOM, "%s: out of memory", what); goto done; }
            }
            continue;
        }
        st_entry *e = &es[ne];
        s = st_entry_read(m, what, data_len, e);
        if (s != KN_OK) goto done;
        e->t.name = st_dup(m->key, m->key_len);
        if (!e->t.name) { s = kn_error(KN_ERR_OOM, "%s: out of memory", what); goto done; }
        e->t.data = data + e->begin;
        ne++;
    }
    qsort(es, (size_t)ne, sizeof *es, st_cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < ne; i++) {
        if (es[i].begin != at) {
            s = kn_error(KN_ERR_FORMAT, "%s: tensor '%s' starts at data offset %llu, expected %llu (%s)", what,
                         es[i].t.name, (unsigned long long)es[i].begin, (unsigned long long)at,
                         es[i].begin > at ? "a gap" : "an overlap");
            goto done;
        }
        at = es[i].end;
    }
    if (at != data_len) {
        s = kn_error(KN_ERR_FORMAT, "%s: the tensors cover %llu data bytes but the file has %llu", what,
                     (unsigned long long)at, (unsigned long long)data_len);
        goto done;
    }
    st->tensors = kn_calloc((size_t)ne + 1, sizeof *st->tensors);
    if (!st->tensors) { s = kn_error(KN_ERR_OOM, "%s: out of memory", what); goto done; }
    for (int i = 0; i < ne; i++) { st->tensors[i] = es[i].t; es[i].t.name = NULL; }
    st->n_tensors = ne;
    s = KN_OK;
done:
    if (es)
        for (int i = 0; i < root->count; i++) kn_free((char *)es[i].t.name);
    kn_free(es);
    kn_arena_free(&arena);
    return s;
}

kn_status kn_safetensors_parse(const uint8_t *buf, size_t len, const char *what, kn_safetensors *out) {
    if (!out || (len && !buf)) return kn_error(KN_ERR_ARG, "kn_safetensors_parse: NULL argument");
    kn_safetensors st = {0};
    st.buf = kn_malloc(len);
    if (!st.buf) return kn_error(KN_ERR_OOM, "kn_safetensors_parse: out of memory for %zu bytes", len);
    if (len) memcpy(st.buf, buf, len);
    st.len = len;
    kn_status s = st_parse_owned(&st, what ? what : "<buffer>");
    if (s != KN_OK) { kn_safetensors_free(&st); return s; }
    *out = st;
    return KN_OK;
}

kn_status kn_safetensors_read(const char *path, kn_safetensors *out) {
    if (!path || !out) return kn_error(KN_ERR_ARG, "kn_safetensors_read: NULL argument");
    kn_safetensors st = {0};
    KN_TRY(kn_file_read_all(path, &st.buf, &st.len));
    kn_status s = st_parse_owned(&st, path);
    if (s != KN_OK) { kn_safetensors_free(&st); return s; }
    *out = st;
    return KN_OK;
}

const kn_st_tensor *kn_safetensors_find(const kn_safetensors *st, const char *name) {
    for (int i = 0; st && i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *kn_safetensors_meta(const kn_safetensors *st, const char *key) {
    for (int i = 0; st && i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
    return NULL;
}
