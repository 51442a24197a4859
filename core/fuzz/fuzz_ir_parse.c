/* fuzz_ir_parse.c — libFuzzer target for the IR text parser (`make fuzz-ir`).
 *
 * Every input is parsed; whatever parses is verified and printed; whatever verifies must
 * print, parse and print again to the same text (the round-trip property of the text
 * format). A crash, a sanitizer report, a leak or a broken round trip is a finding.
 * Not part of libkiln (the Makefile leaves core/fuzz/ out). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kn_graph *g = NULL;
    if (kn_graph_parse((const char *)data, size, &g) != KN_OK) {
        if (!kn_last_error()[0]) abort(); /* every failure carries a message */
        return 0;
    }
    char *t1 = NULL, *t2 = NULL;
    if (kn_graph_to_string(g, &t1) != KN_OK) abort();
    if (kn_graph_verify(g) == KN_OK) {
        kn_graph *h = NULL;
        if (kn_graph_parse(t1, strlen(t1), &h) != KN_OK) abort();
        if (kn_graph_verify(h) != KN_OK) abort();
        if (kn_graph_to_string(h, &t2) != KN_OK) abort();
        if (strcmp(t1, t2) != 0) abort();
        (void)kn_graph_cost(h);
        kn_graph_free(h);
    }
    kn_free(t1);
    kn_free(t2);
    kn_graph_free(g);
    return 0;
}
