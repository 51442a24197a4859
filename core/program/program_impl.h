/* program_impl.h — what the files of core/program/ share: the program's private types
 * (compile.c makes them, stage by stage; program.c runs them; report.c prints and compares them; profile.c times
 * their steps; graph.c replays them as a CUDA graph). */
#ifndef KN_PROGRAM_IMPL_H
#define KN_PROGRAM_IMPL_H

#include "kiln/codegen.h"
#include "kiln/program.h"

typedef struct kn_program_step {
    int32_t node;                /* the node it computes (a kernel: its last member) */
    const kn_device_backend *be; /* who computes it (NULL: a generated kernel) */
    int index;                   /* that backend's device index */
    int kernel;                  /* index into p->kernels, or -1 */
} kn_program_step;

/* Where a compiled program's generated kernels run: C on the CPU's threads, the CUDA
 * dialect under the CUDA emulator (on the CPU, to test the GPU's code without one), or CUDA
 * on the GPU. */
typedef enum kn_target { KN_TARGET_C, KN_TARGET_EMU, KN_TARGET_CUDA } kn_target;

typedef struct kn_program_kernel {
    kn_kernel ir;
    int group;                                     /* its fused group in p->sched */
    void (*fn)(void *ctx, int64_t lo, int64_t hi); /* C */
    void (*emu)(void *args);                       /* EMU: the <name>__emu entry */
    void *gpu;                                     /* CUDA: a cudaKernel_t */
    kn_cuda_launch launch;                         /* EMU, CUDA */
    void (*emu_fin)(void *args);                   /* EMU, with column sums: <name>_fin__emu */
    void *gpu_fin;                                 /* CUDA, with column sums: <name>_fin */
    char fn_name[32];   /* the generated function it runs: its own, or an identical twin's */
    uint64_t text_hash; /* of its source under a neutral name (finding twins) */
} kn_program_kernel;

struct kn_program {
    kn_graph *g;              /* owned: the graph after passes */
    kn_device dev;
    kn_program_step *steps;   /* owned, in order */
    int nsteps;
    kn_tensor **bound;        /* per node: the bound tensor of an input/param (owned alias) */
    kn_tensor **vals;         /* per node, during a run */
    bool *is_output;
    kn_tensor **outs;         /* per output, after a run (owned aliases) */
    kn_tensor **out_bound;    /* per output: where the caller wants it written (kn_program_bind_output), or NULL */
    int32_t *out_place;       /* per output: the value placed in out_bound's memory before a run, or -1 */
    kn_interp_hook hook;      /* called after each step (kn_program_set_hook), or NULL */
    void *hook_ctx;
    bool *deferred;           /* per node: a param supplied during the run (kn_program_defer) */
    kn_collectives coll;      /* runs the collective steps (kn_program_set_collectives); run NULL: none */
    /* COMPILED */
    kn_schedule *sched;
    kn_program_kernel *kernels;
    int nkernels;
    kn_cc_module *module;
    kn_target target;
    void *gpu_module;         /* CUDA: the kn_cuda_module of the kernels */
    int32_t *last_step;       /* per node: the last step reading it (liveness over steps) */
    void **ptrs;              /* scratch: a kernel's buffer pointers */
    kn_program_stats stats;
    double *step_ms;          /* per step, summed over runs, when KILN_PROFILE_STEPS is set */
    bool env_profile;         /* KILN_PROFILE_STEPS, until the end of the first run (not counted) */
    kn_event **prof_ev;       /* a GPU program's step profile: nsteps + 1 events, between the steps */
    int runs;
    /* COMPILED: the memory plan */
    int64_t *mem_off;         /* per node: its offset in the arena, or -1 (allocated on its own) */
    int32_t *mem_def, *mem_last; /* per node: the steps that make it and last read it (its aliases too) */
    int32_t *mem_from;        /* per node: the value whose bytes it was written over (in place), or -1 */
    int32_t *ce_pair;         /* per step: cross_entropy_bwd's paired cross_entropy step, -2 at that step, or -1
                               * (kn_program_pair_losses) */
    char *arena_raw, *arena;  /* owned; arena is arena_raw aligned to 64 bytes (host) */
    size_t arena_bytes;       /* CUDA: the arena is GPU memory of this size (kn_device_free) */
    const struct kn_program *arena_owner; /* CUDA: whose held arena a run may borrow (kn_program_share_arena) */
    bool arena_borrowed;      /* this run's arena is arena_owner's */
    /* CUDA graphs (kn_program_set_cuda_graph) */
    bool graph_on, capturing;
    int graph_runs;           /* runs since graphs were turned on: the first warms up, the second captures */
    void *graph_exec;         /* the instantiated graph (cudaGraphExec_t) */
    struct kn_cuda_hold *graph_hold; /* the blocks freed during the capture, the graph's */
    kn_tensor **dev_const;    /* per node: the device copy of a host-made constant */
    kn_tensor **graph_src;    /* per node: the bound source the graph reads */
    kn_tensor **graph_outs;   /* per output: the tensor the graph writes */
};

/* program.c: run every step once, in order (kn_program_run's body; a CUDA graph's capture). */
kn_status kn_program_run_steps(kn_program *p);

/* graph.c: the device copy of host value v (a constant), made once for every run of the
 * graph; forget the graph and what it holds; run the program through its graph (the first
 * run warms up, the second captures, later ones only launch). */
kn_status kn_program_device_const(kn_program *p, int32_t v, const kn_tensor *host, kn_tensor **out);
void kn_program_graph_release(kn_program *p);
kn_status kn_program_run_graph(kn_program *p);
/* KN_OK when the program has no collectives, or its context lets a CUDA graph hold them. */
kn_status kn_program_graph_collectives_ok(const kn_program *p, const char *who);

/* outputs.c: bound outputs' values placed in the caller's memory before the steps (after
 * the sources are bound), then the rest copied there and kn_program_output pointed at it
 * (after the steps, before the values are freed); what the program frees. */
kn_status kn_program_outputs_place(kn_program *p);
kn_status kn_program_outputs_finish(kn_program *p);
void kn_program_outputs_free(kn_program *p);

/* profile.c: the step profile's clock around a run (see the file). The wall clock in ms;
 * at the start of a run (KILN_PROFILE_STEPS turns the profile on; a profiled program gets
 * its events); around step s (begin returns the start, end the step's ms to add: 0 with
 * events, whose times the run's end adds); at the end of a run; when the program is freed
 * (printing the profile under KILN_PROFILE_STEPS first). */
double kn_program_now_ms(void);
void kn_program_profile_run_begin(kn_program *p);
double kn_program_profile_begin(kn_program *p, int s);
double kn_program_profile_end(kn_program *p, int s, double t0);
void kn_program_profile_run_end(kn_program *p);
void kn_program_profile_free(kn_program *p);

/* plan.c: bytes a value takes in the memory plan's arena (its size rounded up to 64); the
 * plan itself (mem_off, mem_def, mem_last, mem_from, the arena's size, the stats, and the
 * aliased flag of the kernel buffers it writes in place), made by compile.c's plan stage
 * once the steps, their kernels' IR and their liveness are known, before rendering. */
size_t kn_program_plan_size(const kn_type *t);
kn_status kn_program_plan_memory(kn_program *p, bool share); /* share false: no reuse (opts.no_plan) */
/* The cross-entropy pairs (plan.c): a training step's cross_entropy and cross_entropy_bwd
 * library steps made by one backend call at the backward's step (p->ce_pair,
 * stats.ce_fused). COMPILED programs, after the plan. */
kn_status kn_program_pair_losses(kn_program *p);

#endif
