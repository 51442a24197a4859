/* compile.c — kn_program_compile (kiln/program.h): the compile pipeline as a table of
 * stages, run by one loop that times and logs each of them.
 *
 *   passes ─► decompose ─► schedule ─► lower ─► plan ─► render ─► load
 *
 * Every stage reads what the earlier ones left in the program (and in the kn_compile
 * record below) and adds its part; each says in one line what it made (kn_program_stats's
 * stages, `kiln compile --stages`). A NODES program runs passes, schedule and plan (its
 * liveness) only. What is compiled depends on the graph and the options alone: no stage
 * reads the environment (the C compiler's name, KILN_CC, and the cache's directory pick
 * the tool and where its output goes, not the code).
 *
 * The memory plan comes before rendering, so the renderer knows, rather than guesses, which
 * of a kernel's pointers alias: the plan marks the buffers it wrote in place (kn_kbuf's
 * aliased) and the C renderer drops `restrict` from those alone. It comes after lowering,
 * because the plan's liveness is over the kernels' own loads and stores (a fused kernel
 * reads the base of a view chain, not the view) and its in-place rule compares how a
 * kernel indexes its buffers (kn_kernel_same_map). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/codegen.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif
#include "kiln/passes.h"
#include "kiln/program.h"
#include "program/program_impl.h"
#include "runtime/cuda_flash_tc.h"

/* What the stages hand each other besides the program itself. */
typedef struct kn_compile {
    kn_program *p;
    kn_program_opts o;
    const char *decompose;     /* the decompose variant: "decompose" or "decompose:gpu" */
    kn_pass_report passes_rep; /* the caller's passes */
    kn_pass_report dec_rep;    /* decompose's */
    kn_cuda_limits lim;        /* EMU, CUDA: the launch shapes the kernels are rendered for */
    char *src;                 /* render: the program's source (owned) */
    size_t len, cap;
    int naliased;              /* plan: kernel buffers the plan made alias (no restrict) */
} kn_compile;

/* ---------------------------------------------------------------- passes */

const kn_pass_target *kn_program_target_default(void) {
    static kn_pass_target t;
    static bool made = false;
    if (!made) { /* the kernel table's head dims, asked once (a fact of the build, not of a device) */
        int n = 0;
        for (int d = 8; d <= 512 && n < KN_PASS_TARGET_DIMS; d += 8)
            if (kn_flash_tc_kernel(KN_FLASH_TC_BF16, d)) t.flash_bf16_dims[n++] = d;
        made = true;
    }
    return &t;
}

/* The caller's pass list (kiln/passes.h): NULL, "" and "none" run nothing. */
static kn_status stage_passes(kn_compile *c) {
    kn_program *p = c->p;
    const char *list = c->o.passes;
    kn_status st = KN_OK;
    memset(&c->passes_rep, 0, sizeof c->passes_rep);
    c->passes_rep.nodes_before = c->passes_rep.nodes_after = p->g->nnodes;
    const kn_pass_target *t = c->o.target ? c->o.target : kn_program_target_default();
    if (list && list[0] && strcmp(list, "none")) st = kn_passes_run_on(p->g, list, t, &c->passes_rep);
    for (int i = 0; st == KN_OK && i < p->g->nnodes; i++) /* the unfused step count */
        p->stats.nodes_computing += p->g->nodes[i].op != KN_OP_INPUT && p->g->nodes[i].op != KN_OP_PARAM;
    return st;
}

static void sum_passes(const kn_compile *c, char *out, size_t n) {
    const kn_pass_report *r = &c->passes_rep;
    snprintf(out, n, "%s: %d -> %d nodes (%d passes)", c->o.passes && c->o.passes[0] ? c->o.passes : "none",
             r->nodes_before, r->nodes_after, r->npasses);
}

/* ---------------------------------------------------------------- decompose */

/* COMPILED: composite ops into the primitives the fusion scheduler fuses. Only the core's
 * decompose: no lab unit (cse, dce are lab 04's) stands between a student and a compiled
 * program. The nodes decompose bypasses are dead; the scheduler never schedules a dead
 * node. A GPU keeps the loss's library kernel (decompose.c says why); opts.keep_loss does
 * so on the CPU too: the GPU's loss steps, and their memory plan, without a GPU. */
static kn_status stage_decompose(kn_compile *c) {
    static const kn_pass codegen_passes[] = {
        {"decompose", kn_pass_decompose, "composite ops into primitives", kn_decompose_check_arg, false},
    };
    c->decompose = c->p->target == KN_TARGET_CUDA || c->o.keep_loss ? "decompose:gpu" : "decompose";
    return kn_passes_run_with(codegen_passes, 1, c->p->g, c->decompose, &c->dec_rep);
}

static void sum_decompose(const kn_compile *c, char *out, size_t n) {
    const kn_pass_report *r = &c->dec_rep;
    int64_t fired = r->npasses ? kn_pass_stats_total(&r->pass[0]) : 0;
    snprintf(out, n, "%s: %d -> %d nodes, %lld rewrites%s", c->decompose, r->nodes_before, r->nodes_after,
             (long long)fired, strchr(c->decompose, ':') ? " (the loss stays library steps)" : "");
}

/* ---------------------------------------------------------------- schedule */

/* NODES: one step per computing node, in definition order (the interpreter's), each run by
 * the device's backend, or the host's for what the device does not compute. */
static kn_status schedule_nodes(kn_program *p) {
    const kn_graph *g = p->g;
    const kn_device_backend *be = kn_device_backend_get(p->dev.type), *host = kn_device_backend_get(KN_DEVICE_CPU);
    char ds[32];
    /* on_host: made by a host step (a source the device does not compute: a `full`). A step
     * reading one runs on the device all the same, on the device copy made in the first run
     * (kn_program_device_const): computing a view of it on the host (the broadcast of a
     * loss's gradient) would make and upload the whole tensor in every run. Only an op the
     * device lacks, all of whose operands are host values, runs on the host. */
    bool *on_host = kn_calloc((size_t)g->nnodes + 1, sizeof *on_host);
    if (!on_host) return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory");
    kn_status st = KN_OK;
    for (int32_t i = 0; st == KN_OK && i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) continue;
        kn_program_step s = {i, be, p->dev.index, -1};
        if (kn_op_get(n->op)->category == KN_CAT_COLLECTIVE) { /* the context runs it, on the device's values */
            p->steps[p->nsteps++] = s;
            continue;
        }
        bool host_operands = be != host && n->nin > 0;
        for (int j = 0; j < n->nin; j++) host_operands &= on_host[n->in[j]];
        if (!be->supports_op(be->ctx, n->op)) {
            if ((n->nin != 0 && !host_operands) || !host->supports_op(host->ctx, n->op)) {
                st = kn_error(KN_ERR_UNSUPPORTED, "kn_program_compile: %%%d = %s: the %s backend has no kernel for it",
                              i, kn_op_name(n->op), kn_device_str(p->dev, ds, sizeof ds));
                break;
            }
            s = (kn_program_step){i, host, 0, -1}; /* a source the device does not compute, or a view of one */
            on_host[i] = be != host;
        }
        p->steps[p->nsteps++] = s;
    }
    kn_free(on_host);
    return st;
}

/* COMPILED: fuse (kn_schedule_build_opts) and make the steps in run order: a generated
 * kernel per fused group (its IR comes in the lower stage), a library step per other group,
 * on the device's backend (a source it does not compute, such as a `full`, on the host, as
 * in the node-by-node program). */
static kn_status schedule_compiled(kn_program *p) {
    const kn_graph *g = p->g;
    const kn_device_backend *be = kn_device_backend_get(p->dev.type), *host = kn_device_backend_get(KN_DEVICE_CPU);
    kn_schedule_opts so = {.gpu = p->target != KN_TARGET_C}; /* the CUDA target and its emulator */
    /* KILN_NO_COLSUMS=1: column sums stay library steps on a GPU too (the baseline of their
     * folding, for a before/after on one machine; core/codegen/NOTES.md, "Column sums") */
    so.no_colsums = getenv("KILN_NO_COLSUMS") && atoi(getenv("KILN_NO_COLSUMS")) != 0;
    KN_TRY(kn_schedule_build_opts(g, &so, &p->sched));
    const kn_schedule *sc = p->sched;
    p->kernels = kn_calloc((size_t)sc->nfused + 1, sizeof *p->kernels);
    /* on_host: a value a library step makes on the host (a source the device does not
     * compute, or a step all of whose operands are such values: a view of a constant). A
     * generated kernel that reads one gets it copied over at run time (run_kernel). */
    bool *on_host = kn_calloc((size_t)g->nnodes + 1, sizeof *on_host);
    kn_status st = p->kernels && on_host ? KN_OK : kn_error(KN_ERR_OOM, "kn_program_compile: out of memory");
    char ds[32];
    for (int gi = 0; gi < sc->ngroups && st == KN_OK; gi++) {
        const kn_group *G = &sc->groups[gi];
        if (G->fused) {
            p->kernels[p->nkernels].group = gi;
            p->steps[p->nsteps++] = (kn_program_step){G->at, NULL, 0, p->nkernels++};
            continue;
        }
        const kn_node *n = &g->nodes[G->nodes[0]];
        kn_program_step step = {G->nodes[0], be, p->dev.index, -1};
        bool host_operands = be != host && kn_op_get(n->op)->category != KN_CAT_COLLECTIVE;
        for (int j = 0; j < n->nin; j++) host_operands &= on_host[n->in[j]];
        if (host_operands && host->supports_op(host->ctx, n->op)) {
            step = (kn_program_step){G->nodes[0], host, 0, -1};
            on_host[G->nodes[0]] = true;
        } else if (!be->supports_op(be->ctx, n->op) && kn_op_get(n->op)->category != KN_CAT_COLLECTIVE)
            st = kn_error(KN_ERR_UNSUPPORTED, "kn_program_compile: %%%d = %s: the %s backend has no kernel for it",
                          G->nodes[0], kn_op_name(n->op), kn_device_str(p->dev, ds, sizeof ds));
        p->steps[p->nsteps++] = step;
    }
    kn_free(on_host);
    return st;
}

/* The graph after the passes verified, the program's per-node arrays, then the steps. */
static kn_status stage_schedule(kn_compile *c) {
    kn_program *p = c->p;
    KN_TRY(kn_graph_verify(p->g));
    size_t nn = (size_t)p->g->nnodes;
    p->steps = kn_calloc(nn + 1, sizeof *p->steps);
    p->bound = kn_calloc(nn + 1, sizeof *p->bound);
    p->deferred = kn_calloc(nn + 1, sizeof *p->deferred);
    p->vals = kn_calloc(nn + 1, sizeof *p->vals);
    p->is_output = kn_calloc(nn + 1, sizeof *p->is_output);
    p->outs = kn_calloc((size_t)p->g->noutputs + 1, sizeof *p->outs);
    p->last_step = kn_calloc(nn + 1, sizeof *p->last_step);
    if (!p->steps || !p->bound || !p->deferred || !p->vals || !p->is_output || !p->outs || !p->last_step)
        return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory for %zu nodes", nn);
    for (int i = 0; i < p->g->noutputs; i++) p->is_output[p->g->outputs[i]] = true;
    return c->o.mode == KN_PROGRAM_COMPILED ? schedule_compiled(p) : schedule_nodes(p);
}

static void sum_schedule(const kn_compile *c, char *out, size_t n) {
    const kn_program *p = c->p;
    if (!p->sched) snprintf(out, n, "%d steps, one per computing node", p->nsteps);
    else snprintf(out, n, "%d steps: %d fused groups, %d library steps", p->nsteps, p->sched->nfused,
                  p->sched->nlibrary);
}

/* ---------------------------------------------------------------- lower */

/* The emulator runs every thread of a block as a coroutine: small blocks and few of them
 * keep it quick, and still exercise the grid-stride loops and the block combine. */
static const kn_cuda_limits kn_emu_limits = {2, 64, 128};

/* Kernel IR for every fused group (kn_kernel_lower) and, for the CUDA dialect, the launch
 * shape it is rendered for (the device's limits; the emulator's small ones). */
static kn_status stage_lower(kn_compile *c) {
    kn_program *p = c->p;
    c->lim = kn_emu_limits;
#if KN_HAVE_CUDA
    if (p->target == KN_TARGET_CUDA) KN_TRY(kn_cuda_limits_get(p->dev.index, &c->lim, NULL, NULL));
#endif
    int maxbufs = 1;
    for (int i = 0; i < p->nkernels; i++) {
        kn_program_kernel *k = &p->kernels[i];
        KN_TRY(kn_kernel_lower(p->g, p->sched, k->group, &k->ir));
        if (k->ir.nbufs > maxbufs) maxbufs = k->ir.nbufs;
        if (p->target == KN_TARGET_C) continue;
        const kn_cuda_limits *lim = &c->lim;
        kn_clear_error();
        k->launch = kn_cuda_launch_config(&k->ir, lim);
        char why[256];
        snprintf(why, sizeof why, "%s", kn_last_error());
        if (k->launch.block == 0 || k->launch.grid == 0 || k->launch.block % 32 || k->launch.block > (unsigned)lim->max_threads)
            return kn_error(k->launch.block == 0 ? KN_ERR_NOT_IMPLEMENTED : KN_ERR_ARG, "kn_program_compile: "
                            "kn_cuda_launch_config gave grid %u x block %u for %s (%lld x %lld); a block is whole warps, "
                            "at most %d threads%s%s", k->launch.grid, k->launch.block, k->ir.name, (long long)k->ir.outer_n,
                            (long long)k->ir.inner_n, lim->max_threads, why[0] ? ": " : "", why);
    }
    p->ptrs = kn_calloc((size_t)maxbufs * 2, sizeof *p->ptrs); /* a kernel's buffers, then cudaLaunchKernel's argument pointers */
    return p->ptrs ? KN_OK : kn_error(KN_ERR_OOM, "kn_program_compile: out of memory");
}

static void sum_lower(const kn_compile *c, char *out, size_t n) {
    const kn_program *p = c->p;
    int red = 0, bufs = 0;
    for (int i = 0; i < p->nkernels; i++) {
        red += p->kernels[i].ir.reduces;
        bufs += p->kernels[i].ir.nbufs;
    }
    snprintf(out, n, "%d kernels (%d with a reduction), %d buffers%s", p->nkernels, red, bufs,
             p->target == KN_TARGET_C ? "" : p->target == KN_TARGET_EMU ? ", launch shapes for the emulator"
                                                                         : ", launch shapes for the GPU");
}

/* ---------------------------------------------------------------- plan */

/* Liveness over the steps: the last step that reads each value (through a kernel's loads
 * for a generated kernel, its operands for a library step). */
static void liveness(kn_program *p) {
    const kn_graph *g = p->g;
    for (int i = 0; i < g->nnodes; i++) p->last_step[i] = -1;
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        if (sp->kernel < 0) {
            const kn_node *n = &g->nodes[sp->node];
            for (int k = 0; k < n->nin; k++) p->last_step[n->in[k]] = s;
            continue;
        }
        const kn_kernel *k = &p->kernels[sp->kernel].ir;
        for (int b = 0; b < k->nbufs; b++)
            if (!k->bufs[b].store) p->last_step[k->bufs[b].value] = s;
    }
}

/* Liveness over the steps (every program: a run frees each value after its last reader);
 * COMPILED: the memory plan (plan.c), which marks the kernel buffers it made alias. */
static kn_status stage_plan(kn_compile *c) {
    kn_program *p = c->p;
    liveness(p);
    if (c->o.mode != KN_PROGRAM_COMPILED) return KN_OK;
    KN_TRY(kn_program_plan_memory(p, !c->o.no_plan)); /* the arena: host memory for C and the emulator, GPU memory for CUDA */
    KN_TRY(kn_program_pair_losses(p));
    for (int i = 0; i < p->nkernels; i++)
        for (int b = 0; b < p->kernels[i].ir.nbufs; b++) c->naliased += p->kernels[i].ir.bufs[b].aliased;
    return KN_OK;
}

static void sum_plan(const kn_compile *c, char *out, size_t n) {
    const kn_program *p = c->p;
    const kn_program_stats *s = &p->stats;
    if (c->o.mode != KN_PROGRAM_COMPILED) {
        snprintf(out, n, "liveness over %d steps (no arena: each value is allocated when made)", p->nsteps);
        return;
    }
    snprintf(out, n, "arena %.3f MB for %.3f MB of buffers (lower bound %.3f MB); %d in place, %d kernel buffers "
             "aliased%s", s->mem_planned / 1e6, s->mem_sum / 1e6, s->mem_lower / 1e6, s->mem_inplace, c->naliased,
             s->ce_fused ? "; the loss and its gradient in one pass" : "");
}

/* ---------------------------------------------------------------- render */

/* Append text to the growing source. */
static kn_status append(char **src, size_t *len, size_t *cap, const char *text) {
    size_t n = strlen(text);
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 8192;
        while (nc < *len + n + 1) nc *= 2;
        char *q = kn_realloc(*src, nc);
        if (!q) return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory for the generated source");
        *src = q;
        *cap = nc;
    }
    memcpy(*src + *len, text, n + 1);
    *len += n;
    return KN_OK;
}

static kn_status render_kernel(kn_target t, const kn_kernel *k, const kn_cuda_launch *l, char **src, size_t *len,
                               size_t *cap) {
    if (t == KN_TARGET_C) return kn_render_c(k, src, len, cap);
    return kn_render_cuda(k, t == KN_TARGET_EMU ? KN_CUDA_EMU : KN_CUDA_NVRTC, l, src, len, cap);
}

static const char *prelude(kn_target t, bool scalar_math) {
    return t == KN_TARGET_C ? kn_render_c_prelude_math(!scalar_math)
                            : kn_render_cuda_prelude(t == KN_TARGET_EMU ? KN_CUDA_EMU : KN_CUDA_NVRTC);
}

/* Render kernel k into the program's source unless a kernel with the same text is there
 * already (the same layer's kernels repeat once per layer): then k calls that function. The
 * name is the only difference between two renderings of the same kernel, so k is rendered
 * once under a neutral name to compare. */
static kn_status render_unique(kn_program *p, kn_program_kernel *k, char **src, size_t *len, size_t *cap) {
    char *mine = NULL;
    size_t ml = 0, mc = 0;
    char real[32];
    snprintf(real, sizeof real, "%s", k->ir.name);
    snprintf(k->ir.name, sizeof k->ir.name, "kn_same");
    kn_status st = render_kernel(p->target, &k->ir, &k->launch, &mine, &ml, &mc);
    snprintf(k->ir.name, sizeof k->ir.name, "%s", real);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; st == KN_OK && i < ml; i++) h = (h ^ (unsigned char)mine[i]) * 1099511628211ull;
    k->text_hash = h;
    int twin = -1;
    for (int i = 0; st == KN_OK && i < p->nkernels && twin < 0; i++)
        if (p->kernels[i].text_hash == h && !strcmp(p->kernels[i].fn_name, p->kernels[i].ir.name)) {
            char *theirs = NULL;
            size_t tl = 0, tc = 0;
            kn_kernel copy = p->kernels[i].ir; /* shallow: only the name changes, then back */
            snprintf(copy.name, sizeof copy.name, "kn_same");
            st = render_kernel(p->target, &copy, &p->kernels[i].launch, &theirs, &tl, &tc);
            if (st == KN_OK && tl == ml && !memcmp(theirs, mine, ml)) twin = i;
            kn_free(theirs);
        }
    kn_free(mine);
    KN_TRY(st);
    if (twin >= 0) {
        snprintf(k->fn_name, sizeof k->fn_name, "%s", p->kernels[twin].fn_name);
        return KN_OK;
    }
    snprintf(k->fn_name, sizeof k->fn_name, "%s", k->ir.name);
    p->stats.nunique++;
    return render_kernel(p->target, &k->ir, &k->launch, src, len, cap);
}


/* One source for the target: the prelude, then every kernel not identical to an earlier one. */
static kn_status stage_render(kn_compile *c) {
    kn_program *p = c->p;
    KN_TRY(append(&c->src, &c->len, &c->cap, prelude(p->target, c->o.scalar_math)));
    for (int i = 0; i < p->nkernels; i++) KN_TRY(render_unique(p, &p->kernels[i], &c->src, &c->len, &c->cap));
    return KN_OK;
}

static void sum_render(const kn_compile *c, char *out, size_t n) {
    const kn_program *p = c->p;
    snprintf(out, n, "%d kernels as %d functions, %zu bytes of %s", p->nkernels, p->stats.nunique, c->len,
             p->target == KN_TARGET_C ? "C" : p->target == KN_TARGET_EMU ? "CUDA C for the emulator" : "CUDA C");
}

/* ---------------------------------------------------------------- load */

/* Compile the rendered source for the target and find each kernel's entry. */
static kn_status load_kernels(kn_program *p, const char *src) {
    if (p->nkernels == 0) return KN_OK;
    if (p->target == KN_TARGET_CUDA) {
#if KN_HAVE_CUDA
        bool cached = false;
        KN_TRY(kn_cuda_module_load(p->dev.index, src, "kiln_program.cu", (kn_cuda_module **)&p->gpu_module, &cached, NULL));
        for (int i = 0; i < p->nkernels; i++) {
            KN_TRY(kn_cuda_module_kernel(p->gpu_module, p->kernels[i].fn_name, &p->kernels[i].gpu));
            char fin[48]; /* column sums: the finishing kernel (kn_cuda_colsum_finish_launch) */
            snprintf(fin, sizeof fin, "%s_fin", p->kernels[i].fn_name);
            if (p->kernels[i].ir.ncolsums) KN_TRY(kn_cuda_module_kernel(p->gpu_module, fin, &p->kernels[i].gpu_fin));
        }
        p->stats.cached = cached;
        snprintf(p->stats.source, sizeof p->stats.source, "(NVRTC, in memory)");
        return KN_OK;
#else
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_compile: kiln was built without CUDA");
#endif
    }
    kn_cc_info info = {0};
    KN_TRY(kn_cc_compile(src, &p->module, &info));
    p->stats.cached = info.cached;
    snprintf(p->stats.source, sizeof p->stats.source, "%s", info.path);
    for (int i = 0; i < p->nkernels; i++) {
        kn_program_kernel *k = &p->kernels[i];
        char name[48];
        snprintf(name, sizeof name, "%s%s", k->fn_name, p->target == KN_TARGET_EMU ? "__emu" : "");
        void *f = kn_cc_symbol(p->module, name);
        if (!f) return kn_error(KN_ERR_INTERNAL, "kn_program_compile: %s has no function %s", info.path, name);
        /* a data pointer to a function pointer, as dlsym's users do */
        if (p->target == KN_TARGET_EMU) memcpy(&k->emu, &f, sizeof f);
        else memcpy(&k->fn, &f, sizeof f);
        if (p->target == KN_TARGET_EMU && k->ir.ncolsums) { /* column sums: the finishing kernel */
            snprintf(name, sizeof name, "%s_fin__emu", k->fn_name);
            f = kn_cc_symbol(p->module, name);
            if (!f) return kn_error(KN_ERR_INTERNAL, "kn_program_compile: %s has no function %s", info.path, name);
            memcpy(&k->emu_fin, &f, sizeof f);
        }
    }
    return KN_OK;
}

static kn_status stage_load(kn_compile *c) { return load_kernels(c->p, c->src); }

static void sum_load(const kn_compile *c, char *out, size_t n) {
    const kn_program *p = c->p;
    if (p->nkernels == 0) snprintf(out, n, "nothing to compile");
    else snprintf(out, n, "%d entries from %s%s", p->nkernels, p->stats.source, p->stats.cached ? " (cache hit)" : "");
}

/* ---------------------------------------------------------------- the table and its loop */

/* A stage: what it does to the program, and the line that says what it made. */
typedef struct kn_stage {
    const char *name;
    bool compiled_only; /* a NODES program skips it */
    kn_status (*run)(kn_compile *c);
    void (*summary)(const kn_compile *c, char *out, size_t n);
} kn_stage;

/* ORDER: kiln/program.h's list. */
static const kn_stage kn_stages[KN_PROGRAM_NSTAGES] = {
    {"passes", false, stage_passes, sum_passes},
    {"decompose", true, stage_decompose, sum_decompose},
    {"schedule", false, stage_schedule, sum_schedule},
    {"lower", true, stage_lower, sum_lower},
    {"plan", false, stage_plan, sum_plan},
    {"render", true, stage_render, sum_render},
    {"load", true, stage_load, sum_load},
};

kn_status kn_program_compile(kn_program **out, const kn_graph *g, const kn_program_opts *opts) {
    if (!out || !g) return kn_error(KN_ERR_ARG, "kn_program_compile: NULL argument");
    *out = NULL;
    kn_program_opts o = opts ? *opts : (kn_program_opts){.device = KN_CPU, .mode = KN_PROGRAM_NODES};
    kn_target target = o.device.type != KN_DEVICE_CPU ? KN_TARGET_CUDA : o.cuda_emu ? KN_TARGET_EMU : KN_TARGET_C;
    if (o.mode == KN_PROGRAM_COMPILED && o.device.type != KN_DEVICE_CPU && o.device.type != KN_DEVICE_CUDA) {
        char ds[32];
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_compile: no code generator for %s: use the node-by-node program",
                        kn_device_str(o.device, ds, sizeof ds));
    }
    if (o.mode == KN_PROGRAM_COMPILED && target != KN_TARGET_CUDA && !kn_cc_available()) {
        static bool warned = false;
        if (!warned) kn_log(KN_LOG_WARN, "no C compiler found ('%s' is not on PATH): running the interpreter's "
                            "kernels instead of generated code", getenv("KILN_CC") && *getenv("KILN_CC") ? getenv("KILN_CC") : "cc");
        warned = true;
        o.mode = KN_PROGRAM_NODES;
    }
    KN_TRY(kn_device_check("kn_program_compile", o.device));
    kn_program *p = kn_calloc(1, sizeof *p);
    if (!p) return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory");
    p->dev = o.device;
    p->target = target;
    p->stats.mode = o.mode;
    double t0 = kn_program_now_ms();
    kn_compile c = {.p = p, .o = o};
    kn_status st = kn_graph_copy(&p->g, g);
    for (int i = 0; st == KN_OK && i < KN_PROGRAM_NSTAGES; i++) {
        const kn_stage *s = &kn_stages[i];
        kn_program_stage_log *l = &p->stats.stages[i];
        l->name = s->name;
        if (s->compiled_only && o.mode != KN_PROGRAM_COMPILED) {
            snprintf(l->summary, sizeof l->summary, "skipped (node by node)");
            continue;
        }
        double ts = kn_program_now_ms();
        st = s->run(&c);
        l->ms = kn_program_now_ms() - ts;
        l->ran = true;
        if (st != KN_OK) break;
        s->summary(&c, l->summary, sizeof l->summary);
        kn_log(KN_LOG_DEBUG, "compile: %-9s %9.2f ms  %s", s->name, l->ms, l->summary);
    }
    kn_free(c.src);
    if (st != KN_OK) { kn_program_free(p); return st; }
    p->stats.nsteps = p->nsteps;
    p->stats.nkernels = p->nkernels;
    p->stats.compile_ms = kn_program_now_ms() - t0;
    *out = p;
    return KN_OK;
}

kn_status kn_program_print_stages(FILE *f, const kn_program *p) {
    if (!f || !p) return kn_error(KN_ERR_ARG, "kn_program_print_stages: NULL argument");
    for (int i = 0; i < KN_PROGRAM_NSTAGES; i++) {
        const kn_program_stage_log *l = &p->stats.stages[i];
        if (l->ran) fprintf(f, "  %-10s %9.2f ms  %s\n", l->name, l->ms, l->summary);
        else fprintf(f, "  %-10s %12s  %s\n", l->name, "-", l->summary);
    }
    fprintf(f, "  %-10s %9.2f ms  %s\n", "total", p->stats.compile_ms, p->stats.mode == KN_PROGRAM_COMPILED
            ? "compiled" : "node by node");
    return KN_OK;
}
