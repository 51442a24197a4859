/* json_impl.h — a small JSON reader for what kiln reads back: safetensors headers.
 *
 * kn_jv_parse turns a JSON text into a tree of kn_jv nodes that all live in one arena
 * (freed at once with kn_arena_free). It accepts exactly RFC 8259 JSON (one value,
 * surrounded by optional whitespace), decodes string escapes including \u escapes and surrogate
 * pairs into UTF-8, keeps each number's source text beside its double (so 64-bit integers
 * are read exactly with kn_jv_u64), and limits nesting to 64. Errors are KN_ERR_FORMAT
 * with the byte offset and what was expected; it never reads past `len`. Internal to
 * core/data (the public writer is kn_json in kiln/base.h). */
#ifndef KILN_DATA_JSON_IMPL_H
#define KILN_DATA_JSON_IMPL_H

#include "kiln/base.h"

typedef enum kn_jv_type { KN_JV_NULL, KN_JV_BOOL, KN_JV_NUMBER, KN_JV_STRING, KN_JV_ARRAY, KN_JV_OBJECT } kn_jv_type;

typedef struct kn_jv {
    kn_jv_type type;
    bool boolean;             /* KN_JV_BOOL */
    double number;            /* KN_JV_NUMBER */
    const char *str;          /* KN_JV_STRING: decoded, NUL-terminated; KN_JV_NUMBER: source text */
    size_t str_len;
    const char *key;          /* the member name when this node is an object member */
    size_t key_len;
    struct kn_jv *child;      /* first element or member (arrays, objects) */
    struct kn_jv *next;       /* next sibling */
    int count;                /* number of elements or members */
    size_t pos;               /* byte offset in the text, for messages */
} kn_jv;

/* Parse text[0..len); nodes are allocated in *arena (initialized by the caller). `what`
 * names the source in messages ("ckpt.safetensors: header"). */
kn_status kn_jv_parse(kn_arena *arena, const char *text, size_t len, const char *what, kn_jv **out);

/* A member of an object by name (first match), NULL when absent or v is not an object. */
const kn_jv *kn_jv_get(const kn_jv *v, const char *key);
/* A number that is a non-negative integer written without fraction or exponent, as u64;
 * false when it is not one (or overflows). */
bool kn_jv_u64(const kn_jv *v, uint64_t *out);

#endif /* KILN_DATA_JSON_IMPL_H */
