/* cse.c — lab 04 unit: common-subexpression elimination (kn_pass_cse, contract in
 * kiln/passes.h).
 *
 * Two nodes with the same op, the same operands, equal attributes and the same type
 * compute the same value, so the second can use the first's. Model code and autograd
 * produce such twins often: the backward of a value used twice builds the same
 * transpose twice, every layer rebuilds the same `full` constant.
 *
 * Walk the nodes in order with a hash table of the nodes kept so far. For node i:
 *   1. redirect its operands through the merges made so far (repl[]): after merging %5
 *      into %3, a node add(%5, %1) is add(%3, %1), and may now match an earlier one;
 *   2. skip inputs and params (they are the graph's interface) and random ops
 *      (kn_op_is_random: two dropouts of the same x draw two different masks);
 *   3. look it up: hash (op, operands, type) into the table; on a hit whose node is
 *      equal (same op, operands, type, kn_attrs_equal), set repl[i] to the hit and
 *      count kn_pass_stats_fire(st, "merged", 1); otherwise insert i.
 * Finish with kn_graph_compact(g, repl, NULL), which drops the merged nodes. The table
 * makes the pass O(nodes); comparing each node with every earlier one would be
 * O(nodes^2), minutes on a large joint graph. */
#include <string.h>

#include "kiln/passes.h"

// Your helpers go here (static): a hash of a node's op, operands and type, and node equality.

kn_status kn_pass_cse(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_cse: NULL graph");
    (void)st;
    return kn_not_implemented("lab04", "kn_pass_cse: hash (op, operands, attributes, type), merge equal nodes");
}
