/* fixture.c — C the listing resolver must read correctly (book/tests/test_listing.py).
 * Not compiled: it only has to look like real kiln code, with the awkward parts: braces
 * inside strings, character literals and comments, macros with bodies, typedefs of every
 * shape, prototypes beside definitions, and marked regions. */
#include <stdio.h>
#define FIX_TRY(x) do { if (!(x)) { return -1; } } while (0)

/* FIX_MAX: a macro with
 * a two-line comment. */
#define FIX_MAX(a, b) \
    ((a) > (b) ? (a) : (b))

typedef struct fix_pair fix_pair;

/* A pair of ints. */
struct fix_pair {
    int a; /* the { first } */
    int b;
};

typedef enum fix_kind { FIX_A, FIX_B } fix_kind;

typedef int (*fix_fn)(const fix_pair *p);

/* The prototype, declared before the definition. */
int fix_braces(const char *s);

static const char *const fix_names[] = {"{", "}", "\"}\""};

// Counts braces, but not the ones in this comment: { { {
// and not those in strings or characters.
int fix_braces(const char *s) {
    int n = 0; /* } */
    const char *fake = "}}} /* not a comment */";
    char c = '}';
    (void)fake;
    (void)c;
    for (; *s; s++) {
        if (*s == '{') n++;
    }
    return n;
}

int fix_after(void) { return fix_braces("{"); } /* trailing */

int fix_region(int x) {
    int y = x * 2;
    // kn:region core-loop
    for (int i = 0; i < 3; i++) {
        // kn:region inner
        y += i;
        // kn:endregion inner
    }
    // kn:endregion core-loop
    return y;
}

/* an unclosed region */
// kn:region dangling
