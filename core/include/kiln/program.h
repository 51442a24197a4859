/* kiln/program.h — kn_program: the compiled object a graph becomes before it runs.
 *
 * A program holds, on one device:
 *   - the graph after passes (its own copy: the caller's graph is not changed);
 *   - the schedule: ordered steps: one per computing node (NODES), or generated kernels
 *     and library steps (COMPILED), collectives among them, each library step run by the
 *     backend of the program's device (kiln/device.h: supports_op is asked at compile
 *     time, so a node the device cannot compute is an error here, naming the op and the
 *     device, not in the middle of a run). A source with no operands that the device
 *     does not compute (a `full`) runs on the host; its consumer's backend copies it;
 *   - the bindings of its inputs and parameters (by name, aliased in place, so a training
 *     loop updates its parameter slab and just runs again) and, after a run, its outputs.
 * The interpreter (kn_interp) stays the reference: a program's results equal it bitwise
 * as long as the program runs the same kernels in the same order (test_program.c).
 *
 * Modes: KN_PROGRAM_NODES runs one step per node. KN_PROGRAM_COMPILED decomposes the
 * composite ops into primitives (the "decompose" pass), fuses (kn_schedule_build), lowers
 * each fused group to kernel IR, plans memory, renders all the kernels as one source (C on
 * the CPU, compiled with cc; CUDA C on a GPU, compiled with NVRTC; the CUDA dialect as C
 * under opts.cuda_emu), compiles it (cached on disk) and runs generated kernels and library
 * steps in order: the stages of core/program/compile.c. Its results equal the
 * interpreter's within rounding (test_codegen.c, test_cudagen.c). On the CPU with no C
 * compiler it says so once (a warning) and runs as NODES. A COMPILED program also plans its memory: the values
 * its steps make (not inputs, params or outputs) share one arena, each at an offset chosen
 * from the lifetimes over the steps (kn_program_stats: mem_sum, mem_planned, mem_lower).
 *
 * Passes: opts.passes names the pass list to run on the copy before scheduling, as
 * kn_passes_run takes it ("fold,cse,dce", "all"; NULL, "" and "none" run nothing); an
 * unknown name is KN_ERR_ARG listing the known ones. kn_program_compile is the one place
 * a program's passes run. */
#ifndef KILN_PROGRAM_H
#define KILN_PROGRAM_H

#include "kiln/device.h"
#include "kiln/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_program_mode {
    KN_PROGRAM_NODES = 0, /* one step per node, each the backend's kernel (the interpreter's order) */
    KN_PROGRAM_COMPILED,  /* fused, generated kernels (kiln/codegen.h) plus library steps */
} kn_program_mode;

typedef struct kn_program_opts {
    kn_device device;   /* where the steps run (KN_CPU by default) */
    const char *passes; /* NULL, "" or "none" (see above) */
    kn_program_mode mode;
    /* COMPILED on the CPU: render the CUDA dialect and run it under the CUDA emulator
     * (core/runtime/cuda_emu.h) instead of C: the GPU's generated code, tested without a
     * GPU (slow: every thread is a coroutine). On a CUDA device the CUDA code runs for real. */
    bool cuda_emu;
    /* COMPILED: keep cross-entropy and its backward as library steps (the "decompose:gpu"
     * variant, which a CUDA device always takes: decompose.c says why) on the CPU too: the
     * GPU's loss steps, and their memory plan, without a GPU. Once an environment variable
     * (KILN_KEEP_LOSS); now only this field decides, so what is compiled depends on the
     * options alone. Initialize opts with designated initializers: fields are added. */
    bool keep_loss;
    /* COMPILED, C: the generated kernels call the scalar expf, logf, tanhf (and the double
     * ones) even where glibc's vector variants are there (kn_cc_vector_math): a few ulp
     * apart, slower; to compare (once the environment variable KILN_SCALAR_MATH). */
    bool scalar_math;
    /* COMPILED: no memory plan: every value its own bytes in the arena, none shared and none
     * written in place (the ablation's "planner off" row: make ablation). */
    bool no_plan;
    /* The facts about the target the passes decide by (kiln/passes.h, kn_pass_target), passed
     * to every pass of opts.passes; NULL: kn_program_target_default(). */
    const struct kn_pass_target *target;
} kn_program_opts;

/* The target facts of kiln's own kernels, the same for every device (a program compiled on
 * the CPU is the one a GPU runs): the head dims of the bf16 tensor-core flash attention
 * kernels (core/runtime/cuda_flash_tc.h). A static object. */
const struct kn_pass_target *kn_program_target_default(void);

/* The compile pipeline (core/program/compile.c): one table of stages that
 * kn_program_compile runs in order, timing each and logging it (KN_LOG_DEBUG):
 *
 *   passes     the caller's pass list (opts.passes)
 *   decompose  composite ops into primitives (COMPILED; "decompose:gpu" keeps the loss)
 *   schedule   the steps: one per node (NODES), or fused groups and library steps
 *   lower      kernel IR for each fused group, and a GPU target's launch shapes
 *   plan       liveness over the steps; COMPILED: the memory plan (arena offsets, values
 *              written in place), which marks the kernels' buffers it made alias
 *   render     one source file for the target (C, or CUDA C: NVRTC or the emulator)
 *   load       compile it (cached on disk) and find each kernel's entry
 *
 * A NODES program skips decompose, lower, render and load. After a compile each stage's
 * record says whether it ran, its wall time and a one-line summary of what it made
 * (`kiln compile --stages` prints them). */
#define KN_PROGRAM_NSTAGES 7
typedef struct kn_program_stage_log {
    const char *name;   /* the stage's name (a static string) */
    bool ran;           /* false: the mode skips it */
    double ms;          /* its wall time */
    char summary[192];  /* what it made, one line ("412 -> 398 nodes", "31 kernels", ...) */
} kn_program_stage_log;

/* What compiling did (kn_program_stats), for reports and benchmarks. */
typedef struct kn_program_stats {
    kn_program_mode mode;    /* what runs: COMPILED falls back to NODES with no C compiler */
    int nsteps, nkernels;    /* steps; of them, generated kernels */
    int nunique;             /* generated functions: kernels with the same code share one */
    int nodes_computing;     /* computing nodes after the pass list, before the compiled mode's
                              * decomposition: the node-by-node program's step count */
    double compile_ms;       /* scheduling, lowering, rendering and the C compiler (or cache) */
    bool cached;             /* the shared object came from the kernel cache */
    char source[768];        /* the generated C file ("" when none) */
    /* COMPILED: the memory plan of the values steps make (not inputs, params, outputs) */
    double mem_sum;          /* bytes: every buffer its own allocation, all live at once */
    double mem_planned;      /* bytes: the arena the plan needs */
    double mem_lower;        /* bytes: the most live at one step (no plan needs less) */
    int64_t graph_launches;  /* runs replayed as one CUDA graph (kn_program_set_cuda_graph) */
    double mem_planned_separate; /* bytes: the arena with no value written in place */
    int mem_inplace;         /* values an elementwise kernel wrote over an operand that died there */
    double mem_inplace_bytes;    /* their bytes */
    int ce_fused;            /* cross_entropy + cross_entropy_bwd step pairs run as one call (one pass over
                              * the logits; core/program/plan.c, kn_program_pair_losses) */
    int outputs_copied;      /* bound outputs (kn_program_bind_output) the last run copied, not placed */
    kn_program_stage_log stages[KN_PROGRAM_NSTAGES]; /* the compile pipeline, in the order it ran */
} kn_program_stats;

typedef struct kn_program kn_program;

/* Copy, verify, (run the passes) and schedule g on opts->device (opts NULL: the CPU, no
 * passes). Errors: a graph that does not verify; an unusable device (kn_device_check); an
 * op the device's backend cannot compute (KN_ERR_UNSUPPORTED naming both). */
kn_status kn_program_compile(kn_program **out, const kn_graph *g, const kn_program_opts *opts);
void kn_program_free(kn_program *p); /* NULL is fine */

/* Bind input or param `name` to t (its type must match the graph's; t is aliased, or
 * copied to the program's device when it lives elsewhere). */
kn_status kn_program_bind(kn_program *p, const char *name, const kn_tensor *t);
/* Run every step in order; every input and param must be bound. Outputs stay until the
 * next run. */
kn_status kn_program_run(kn_program *p);
/* Replay the step as a CUDA graph (a compiled program on a GPU, without hooks, deferred
 * params or step profiles): the next run is an ordinary run that warms up, the one after
 * is captured, and every later run is one graph launch. The numbers are those of the runs
 * without a graph, bit for bit (the same kernels in the same order). Inputs may be rebound
 * between runs (they are copied into the buffers the graph reads); outputs stay the same
 * tensors from run to run. KN_ERR_UNSUPPORTED says why a program cannot; off releases the
 * graph. */
kn_status kn_program_set_cuda_graph(kn_program *p, bool on);
/* Write output i into t from the next run on (t: contiguous, the output's dtype and shape,
 * on the program's device; NULL unbinds). The step that makes the value writes straight into
 * t, as a planned value into the arena: a trainer's gradients land in its slab with no copy
 * and no memory of their own. A value that cannot be placed (an input or param, a view of
 * part of a value, a host value of a GPU program) is copied into t at the end of the run. After
 * a run kn_program_output(p, i) is t. Bind before the first run of a CUDA graph (it writes
 * where it recorded): KN_ERR_ARG after the capture. */
kn_status kn_program_bind_output(kn_program *p, int i, const kn_tensor *t);
/* Let p's runs use owner's memory-plan arena while owner holds one that is large enough (a
 * GPU program replayed as a CUDA graph keeps its arena between runs; NULL: no owner). For
 * two programs that never run at the same time on one device, in stream order: a trainer's
 * step and its evaluation need one arena between them, not two. owner must outlive p's
 * runs. */
kn_status kn_program_share_arena(kn_program *p, const kn_program *owner);
/* Output i of the last run (on the program's device), NULL when none. */
const kn_tensor *kn_program_output(const kn_program *p, int i);

const kn_graph *kn_program_graph(const kn_program *p); /* the graph after passes */
kn_program_stats kn_program_get_stats(const kn_program *p);
/* Time every step of the following runs with the wall clock (CPU programs), or stop; turning
 * it on clears earlier times. With KILN_PROFILE_STEPS set in the environment every program
 * profiles itself and prints its profile to stderr when freed. */
void kn_program_set_profile(kn_program *p, bool on);
/* The `top` costliest steps of the profiled runs: ms per run, the bytes the step moves (the
 * tensors it reads and writes, each counted once) and GB/s; with copy_gbs > 0 also each
 * step's share of that copy bandwidth (measured by the caller in the same run). */
void kn_program_print_profile(FILE *f, const kn_program *p, int top, double copy_gbs);
/* The profiled runs on a roofline (kiln roofline): the header line, then one TSV line per
 * step that computes (node, op, FLOPs, bytes, intensity, ms per run, GFLOP/s, the roof at
 * that intensity, the fraction of it reached, memory or compute bound) under the roofs
 * peak_gflops and bw_gbs. A library step's FLOPs and bytes are its node's cost
 * (kn_node_cost); a generated kernel's FLOPs the sum of its members' and its bytes its
 * buffers, each read or written once (what the fused kernel moves: values it keeps in
 * registers cost nothing). A generated kernel's op is "fused:" and its members' ops. Steps
 * that move bytes without arithmetic (copies, slices) are summed in a final comment line.
 * *nplaced and *placed_ms (may be NULL): the lines written and their ms. */
kn_status kn_program_roofline_tsv(FILE *f, const kn_program *p, double peak_gflops, double bw_gbs, int *nplaced,
                                  double *placed_ms);
/* Run g through the interpreter and through a program compiled with *o on the same random
 * inputs (kn_graph_random_input) and set *maxrel to the largest |a - b| / (1 + |a|) over
 * every output element (NaN against NaN counts 0, against a number +inf). *stats (may be
 * NULL) receives the program's statistics. */
kn_status kn_program_compare(const kn_graph *g, const kn_program_opts *o, uint64_t seed, double *maxrel,
                             kn_program_stats *stats);
/* COMPILED programs: per step, the planned values' live bytes and the arena's high-water
 * mark among them, as TSV ("# step live_bytes arena_top_bytes what" then one line per step):
 * what `kiln compile --memory-plot` plots. */
kn_status kn_program_memory_tsv(FILE *f, const kn_program *p);
/* The compile pipeline's stages as they ran for p: one line each, name, ms and summary
 * (skipped stages say so), then the total. */
kn_status kn_program_print_stages(FILE *f, const kn_program *p);
/* COMPILED programs: the schedule, then every kernel's IR and C, as text (NULL: none). */
kn_status kn_program_print_kernels(FILE *f, const kn_program *p);
/* COMPILED programs: write k<N>.kir, k<N>.c and k<N>.cu (its CUDA rendering) for every
 * kernel, and schedule.txt, into dir. */
kn_status kn_program_emit_kernels(const kn_program *p, const char *dir);
kn_device kn_program_device(const kn_program *p);
int kn_program_nsteps(const kn_program *p);
/* The node a step runs (-1 for an invalid step). */
int32_t kn_program_step_node(const kn_program *p, int step);
/* Call fn(ctx, node, value) after each step's node has its value, before values are freed
 * after their last use (NULL fn: none). The same contract as kn_interp_set_hook: an error
 * from fn stops the run with that status (tests/core/test_program.c). */
void kn_program_set_hook(kn_program *p, kn_interp_hook fn, void *ctx);

/* A param without a binding: kn_program_defer drops param `name`'s binding (and the
 * binding's reference to its memory) and marks it deferred; a step reading it then fails,
 * naming it, until kn_program_bind binds it again (ZeRO-3's evaluation program between a
 * step and kn_dp_gather_state: the model's slab is gone). */
kn_status kn_program_defer(kn_program *p, const char *name);
/* The collectives context of the following runs (kiln/ir.h: grad_store, all_reduce_start,
 * reduce_scatter_start, all_gather_start, comm_wait are its steps; it is polled after every
 * step; NULL: none). CPU and GPU programs alike (a GPU rank's context drives NCCL); a CUDA
 * graph refuses them. */
void kn_program_set_collectives(kn_program *p, const kn_collectives *c);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PROGRAM_H */
