/* place_impl.h — what the placement pass (place.c) shares with its verifier and printer
 * (place_check.c): the placements of parameters and outputs, a value's local type, the
 * options' checks, a node's name in messages. */
#ifndef KILN_PLACE_IMPL_H
#define KILN_PLACE_IMPL_H

#include "kiln/placement.h"

/* The local type of a value of type `global` placed p over `parts` ranks (a 0-d value
 * cannot be a shard: KN_ERR_SHAPE). */
kn_status kn_place_local_type(const kn_type *global, kn_placement p, int parts, kn_type *out);
/* The placement of parameter `name`: the options' callback, else Megatron's (kn_place_gpt_param). */
kn_status kn_place_param_of(const kn_place_opts *o, const char *name, kn_placement *p);
/* The placement output i of g must end in: o->outputs, else the loss (0) R and each
 * gradient its parameter's. */
kn_status kn_place_output_of(const kn_graph *g, const kn_place_opts *o, int i, kn_placement *p);
/* KN_ERR_ARG (naming fn) for a NULL graph or options, or a rank or mesh axis out of range. */
kn_status kn_place_check_opts(const kn_graph *g, const kn_place_opts *o, const char *fn);
/* "%12 = matmul" into buf. */
const char *kn_place_node_name(const kn_graph *g, int32_t i, char *buf, size_t size);

#endif /* KILN_PLACE_IMPL_H */
