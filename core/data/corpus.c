/* corpus.c — the bundled training text: a small probabilistic grammar of English-like
 * sentences, and the unigram entropy that a language model has to beat.
 *
 * Why a grammar rather than a downloaded book: it needs no network, it is the same on every
 * machine (a pure function of the seed through the Philox RNG), and it has structure at
 * every scale a small GPT can discover in a few minutes: spelling of a few dozen words,
 * agreement between subject and verb ("the cat sees" / "the cats see"), "a" before a
 * consonant and "an" before a vowel, tense kept within a sentence, capitals after a full
 * stop, and sentence templates with commas and subordinate clauses.
 *
 * Invariant: generation is sequential, so the text for n bytes is a prefix of the text for
 * any larger n with the same seed. */
#include <math.h>
#include <string.h>

#include "kiln/data.h"

/* ---------------------------------------------------------------- the lexicon */

typedef struct noun { const char *sg, *pl; } noun;
typedef struct verb { const char *s3, *base, *past; } verb;

/* Nouns that can act (subjects and objects), and things (objects and places only). */
static const noun k_agents[] = {
    {"cat", "cats"},         {"dog", "dogs"},         {"bird", "birds"},     {"child", "children"},
    {"farmer", "farmers"},   {"teacher", "teachers"}, {"fox", "foxes"},      {"girl", "girls"},
    {"boy", "boys"},         {"king", "kings"},       {"mouse", "mice"},     {"horse", "horses"},
    {"baker", "bakers"},     {"sailor", "sailors"},   {"owl", "owls"},       {"wolf", "wolves"},
};
static const noun k_things[] = {
    {"ball", "balls"},     {"book", "books"},     {"apple", "apples"},   {"stone", "stones"},
    {"letter", "letters"}, {"song", "songs"},     {"lamp", "lamps"},     {"box", "boxes"},
    {"key", "keys"},       {"cake", "cakes"},     {"map", "maps"},       {"egg", "eggs"},
};
static const noun k_places[] = {
    {"river", "rivers"}, {"tree", "trees"},     {"house", "houses"}, {"garden", "gardens"},
    {"hill", "hills"},   {"bridge", "bridges"}, {"city", "cities"},  {"window", "windows"},
    {"road", "roads"},   {"island", "islands"},
};
static const char *const k_adjs[] = {
    "small", "big",   "old",    "young", "red",    "green",  "quiet",  "happy",
    "brave", "tired", "clever", "bright", "dark",  "little", "gentle", "wild",
    "early", "angry", "empty",  "honest",
};
static const verb k_trans[] = {
    {"sees", "see", "saw"},           {"finds", "find", "found"},        {"likes", "like", "liked"},
    {"carries", "carry", "carried"},  {"watches", "watch", "watched"},   {"follows", "follow", "followed"},
    {"builds", "build", "built"},     {"paints", "paint", "painted"},    {"wants", "want", "wanted"},
    {"opens", "open", "opened"},      {"keeps", "keep", "kept"},         {"brings", "bring", "brought"},
};
static const verb k_intrans[] = {
    {"sleeps", "sleep", "slept"}, {"runs", "run", "ran"},       {"sings", "sing", "sang"},
    {"waits", "wait", "waited"},  {"laughs", "laugh", "laughed"}, {"walks", "walk", "walked"},
    {"dances", "dance", "danced"}, {"swims", "swim", "swam"},
};
static const char *const k_advs[] = {"quickly", "slowly", "quietly", "happily", "often", "again", "carefully"};
static const char *const k_preps[] = {"near", "under", "behind", "beside", "across", "over", "inside"};
static const char *const k_names[] = {"Anna", "Ben", "Clara", "David", "Emma", "Felix", "Greta", "Hugo"};
static const char *const k_plural_dets[] = {"the", "some", "many", "two", "three", "the"};
static const char *const k_conjs[] = {"and", "but", "so"};
static const char *const k_subs[] = {"When", "Because", "While", "After"};
static const char *const k_says[] = {"says", "say", "said"};

#define N_OF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* ---------------------------------------------------------------- generator state */

typedef struct gen {
    kn_rng rng;
    char *buf;
    size_t len, cap;
    bool oom;
    bool cap_next; /* capitalize the next word written */
} gen;

/* Uniform in [0, n): the high half of a 32x32 product (no modulo bias worth the name). */
static uint32_t pick(gen *g, uint32_t n) { return (uint32_t)(((uint64_t)kn_rng_u32(&g->rng) * n) >> 32); }
/* true with probability num/den. */
static bool chance(gen *g, uint32_t num, uint32_t den) { return pick(g, den) < num; }

static void put(gen *g, const char *s) {
    size_t n = strlen(s);
    if (g->oom) return;
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (g->len + n + 1 > cap) cap *= 2;
        char *p = kn_realloc(g->buf, cap);
        if (!p) { g->oom = true; return; }
        g->buf = p;
        g->cap = cap;
    }
    memcpy(g->buf + g->len, s, n + 1);
    if (g->cap_next && n > 0 && s[0] >= 'a' && s[0] <= 'z') g->buf[g->len] = (char)(s[0] - 'a' + 'A');
    if (n > 0 && s[0] != ' ') g->cap_next = false;
    g->len += n;
}

/* A word preceded by a space (none at the start of a line). */
static void word(gen *g, const char *w) {
    if (g->len > 0 && g->buf[g->len - 1] != '\n') put(g, " ");
    put(g, w);
}

static bool starts_with_vowel(const char *w) { return strchr("aeiou", w[0]) != NULL; }

/* Tense of a clause. */
enum { T_PRESENT, T_PAST };

/* A noun phrase, chosen first and written second (a question needs its number before its
 * words). kind 0: agent, 1: thing, 2: place. */
typedef struct np {
    const char *name;  /* a proper name (singular), or NULL */
    const noun *n;
    bool plural;
    const char *adj;   /* or NULL */
    const char *det;
} np;

static np np_choose(gen *g, int kind, bool allow_name) {
    np p = {0};
    if (allow_name && chance(g, 1, 6)) {
        p.name = k_names[pick(g, N_OF(k_names))];
        return p;
    }
    p.n = kind == 0 ? &k_agents[pick(g, N_OF(k_agents))]
        : kind == 1 ? &k_things[pick(g, N_OF(k_things))]
                    : &k_places[pick(g, N_OF(k_places))];
    p.plural = chance(g, 2, 5);
    p.adj = chance(g, 2, 5) ? k_adjs[pick(g, N_OF(k_adjs))] : NULL;
    const char *head = p.plural ? p.n->pl : p.n->sg;
    if (p.plural) p.det = k_plural_dets[pick(g, N_OF(k_plural_dets))];
    else if (kind == 2 || chance(g, 1, 2)) p.det = "the";
    else p.det = starts_with_vowel(p.adj ? p.adj : head) ? "an" : "a";
    return p;
}

static void np_write(gen *g, const np *p) {
    if (p->name) { word(g, p->name); return; }
    word(g, p->det);
    if (p->adj) word(g, p->adj);
    word(g, p->plural ? p->n->pl : p->n->sg);
}

/* Choose and write a noun phrase; returns whether it is plural. */
static bool noun_phrase(gen *g, int kind, bool allow_name) {
    np p = np_choose(g, kind, allow_name);
    np_write(g, &p);
    return p.plural;
}

static const char *verb_form(const verb *v, int tense, bool plural) {
    if (tense == T_PAST) return v->past;
    return plural ? v->base : v->s3;
}

/* subject + verb phrase, with agreement and an optional place or adverb. */
static void clause(gen *g, int tense, int depth) {
    bool plural = noun_phrase(g, 0, true);
    uint32_t form = pick(g, depth < 1 ? 10 : 8);
    if (form < 5) {
        word(g, verb_form(&k_trans[pick(g, N_OF(k_trans))], tense, plural));
        noun_phrase(g, chance(g, 1, 3) ? 0 : 1, true);
    } else if (form < 8) {
        word(g, verb_form(&k_intrans[pick(g, N_OF(k_intrans))], tense, plural));
        if (chance(g, 1, 2)) word(g, k_advs[pick(g, N_OF(k_advs))]);
    } else {
        /* reported speech: "the king says that the owls sleep" */
        word(g, tense == T_PAST ? k_says[2] : plural ? k_says[1] : k_says[0]);
        word(g, "that");
        clause(g, tense, depth + 1);
        return;
    }
    if (chance(g, 1, 3)) {
        word(g, k_preps[pick(g, N_OF(k_preps))]);
        noun_phrase(g, 2, false);
    }
}

static void sentence(gen *g) {
    int tense = chance(g, 1, 2) ? T_PRESENT : T_PAST;
    g->cap_next = true;
    uint32_t form = pick(g, 10);
    if (form < 5) {
        clause(g, tense, 0);
    } else if (form < 7) {
        clause(g, tense, 0);
        put(g, ",");
        word(g, k_conjs[pick(g, N_OF(k_conjs))]);
        clause(g, tense, 0);
    } else if (form < 9) {
        word(g, k_subs[pick(g, N_OF(k_subs))]);
        clause(g, tense, 0);
        put(g, ",");
        clause(g, tense, 0);
    } else {
        /* a question: "Do the cats see a ball?" / "Did Anna sleep?" */
        np subj = np_choose(g, 0, true);
        word(g, tense == T_PAST ? "did" : subj.plural ? "do" : "does");
        np_write(g, &subj);
        if (chance(g, 1, 2)) {
            word(g, k_trans[pick(g, N_OF(k_trans))].base);
            noun_phrase(g, 1, true);
        } else {
            word(g, k_intrans[pick(g, N_OF(k_intrans))].base);
        }
        put(g, "?");
        return;
    }
    put(g, ".");
}

kn_status kn_corpus_generate(uint64_t seed, size_t nbytes, char **out, size_t *out_len) {
    if (!out || !out_len) return kn_error(KN_ERR_ARG, "kn_corpus_generate: out and out_len must not be NULL");
    gen g = {.rng = kn_rng_new(seed)};
    while (!g.oom && g.len < nbytes) {
        int n = 3 + (int)pick(&g, 5); /* sentences in this paragraph */
        for (int i = 0; i < n && !g.oom && g.len < nbytes; i++) sentence(&g);
        put(&g, "\n");
    }
    if (!g.oom && !g.buf) put(&g, ""); /* nbytes == 0: an empty, valid string */
    if (g.oom) {
        kn_free(g.buf);
        return kn_error(KN_ERR_OOM, "kn_corpus_generate: out of memory generating %zu bytes", nbytes);
    }
    g.len = nbytes;
    g.buf[nbytes] = '\0';
    *out = g.buf;
    *out_len = nbytes;
    return KN_OK;
}

kn_status kn_unigram_entropy(const int32_t *tokens, int64_t n, int vocab, double *nats) {
    if (!tokens || !nats || n <= 0 || vocab <= 0)
        return kn_error(KN_ERR_ARG, "kn_unigram_entropy: need tokens, n > 0 (got %lld), vocab > 0 (got %d)",
                        (long long)n, vocab);
    int64_t *count = kn_calloc((size_t)vocab, sizeof *count);
    if (!count) return kn_error(KN_ERR_OOM, "kn_unigram_entropy: out of memory (vocab %d)", vocab);
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= vocab) {
            kn_free(count);
            return kn_error(KN_ERR_ARG, "kn_unigram_entropy: token %d at position %lld is outside [0, %d)",
                            tokens[i], (long long)i, vocab);
        }
        count[tokens[i]]++;
    }
    double h = 0.0;
    for (int v = 0; v < vocab; v++) {
        if (!count[v]) continue;
        double p = (double)count[v] / (double)n;
        h -= p * log(p);
    }
    kn_free(count);
    *nats = h;
    return KN_OK;
}
