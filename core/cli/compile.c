/* compile.c — `kiln compile`: run the graph passes on an IR file or a GPT's graph, check
 * that the optimized graph computes what the original did, and report what changed.
 *
 *   kiln compile FILE.ir | --gpt CONFIG [--graph forward|joint] [--batch B] [--seq T]
 *                [--passes LIST|all|none] [--report out.json] [--emit-ir out.ir]
 *                [--seed N] [--tol X] [--no-check] [--dist ddp|zero1|zero2|zero3 [--bucket-mb X]]
 *                [--stages] [--keep-loss] [--mesh tp=N [--rank R] [--sp]]
 *
 * CONFIG names a GPT: "gpt2" (GPT-2 124M: 12 layers, width 768, 12 heads, context 1024,
 * vocabulary 50257), "small" (what `kiln train` builds by default, vocabulary 65), or
 * comma-separated key=value pairs over either, with the names `kiln train` uses:
 * "small,layers=4,width=128" or "layers=2,width=64,heads=4,context=32,vocab=65". The graph
 * is captured from the model code as the trainer does (inputs "idx" and "targets", i32
 * [B, T]); "joint" (the default) adds autograd's backward.
 *
 * After the passes, both graphs run on the same random inputs (kn_graph_compare) and the
 * largest |Δ| of any output is printed; above --tol (default 1e-6) the command fails.
 * The JSON report holds the passes with their statistics, the times, FLOPs and bytes
 * before and after (kn_graph_cost), the live bytes before and after (the largest live set
 * in node order, kn_graph_live_bytes: what activation checkpointing, --passes
 * remat:POLICY, lowers) and the largest |Δ|; when the compiled program was made
 * (--memory-plot, --schedule, --emit-kernels), its memory plan too: the arena, the arena
 * without in-place writes and the bytes in-place saved. Exit status: 0 ok, 1 a failure
 * (missing or malformed file, a pass or the check failed), 2 bad usage (unknown flag or
 * pass, bad config).
 *
 * --dist ddp (zero1, zero2, zero3) runs the data-parallel pass last (core/passes/ddp.c):
 * the emitted IR then shows every bucket's grad_store, all_reduce_start (reduce_scatter_start)
 * and comm_wait where the schedule runs them (zero3: and each parameter bucket's
 * all_gather_start and comm_wait, forward and backward), and the check compares the
 * gradients the graph stores into its slab (one process, whose all_gather is its own
 * parameters) with the original graph's gradient outputs.
 *
 * --stages compiles the original graph to generated C with the pass list inside the program
 * (kn_program_compile's pipeline: passes, decompose, schedule, lower, plan, render, load) and
 * prints each stage's time and a line of what it made. --keep-loss keeps the loss as library
 * steps on the CPU, as a GPU does (kn_program_opts.keep_loss), for the compiled program.
 *
 * --mesh tp=N runs the placement pass (kiln/placement.h) on the graph as captured, as
 * `kiln train --mesh tp=N` does before its passes: it prints the collectives inserted, and
 * --emit-ir writes rank R's (--rank, default 0) local graph with each value's placement and
 * global type as a comment, the inserted conversions marked; --sp places it with sequence
 * parallelism (KN_PLACE_SEQUENCE_PARALLEL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "kiln/nn.h"
#include "kiln/mesh.h"
#include "kiln/passes.h"
#include "kiln/placement.h"
#include "kiln/program.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln compile FILE.ir | --gpt CONFIG [options]\n"
            "  --gpt CONFIG       gpt2 | small | key=value,... (layers, width, heads, context, vocab)\n"
            "  --graph KIND       joint (forward + backward, default) or forward\n"
            "  --batch B          batch size of the captured GPT graph (default 1)\n"
            "  --seq T            sequence length (default: the context)\n"
            "  --passes LIST      comma list of passes, all (default) or none; passes: %s\n"
            "                     (remat takes a policy: remat:none|selective|full|every:K|mincut;\n"
            "                     autocast a dtype: autocast:bf16|fp16, checked within --tol)\n"
            "  --report FILE      write a JSON report\n"
            "  --schedule         compile to generated C (fusion) and print the schedule: which nodes\n"
            "                     went into which kernel, and why a merge was refused\n"
            "  --emit-kernels DIR compile to generated C and write schedule.txt, each kernel's IR (kN.kir)\n"
            "                     C (kN.c) and CUDA (kN.cu) into DIR\n"
            "  --memory-plot FILE compile to generated C and write the memory plan's live bytes per step\n"
            "                     as TSV (plots/memory.sh draws it with gnuplot); --report then holds\n"
            "                     the plan (arena, in-place savings, lower bound)\n"
            "  --emit-ir FILE     write the optimized graph as IR text\n"
            "  --dist STRATEGY    ddp, zero1, zero2 or zero3: run the data-parallel pass after the others\n"
            "                     (ddp:MB, zero:MB, zero3:MB), so the graph holds its collectives where\n"
            "                     they run (a joint graph; zero3: the parameters' gathers too)\n"
            "  --bucket-mb X      the buckets of --dist, in MB (default 25)\n"
            "  --seed N           seed of the random inputs of the check (default 0)\n"
            "  --tol X            largest |delta| the check accepts (default 1e-6)\n"
            "  --no-check         skip running the graphs before and after\n"
            "  --stages           compile to generated C with the passes inside the program and print\n"
            "                     the compile pipeline: each stage's time and what it made\n"
            "  --keep-loss        the compiled program keeps the loss as library steps, as a GPU does\n"
            "  --mesh tp=N        tensor parallelism: place the captured graph over N ranks (the placement pass);\n"
            "                     --emit-ir then writes rank --rank R's (default 0) local graph with placements;\n"
            "                     --sp: with sequence parallelism\n",
            kn_passes_names());
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Parse "gpt2", "small" and key=value pairs into c; 0 ok, else prints why and returns 2. */
static int parse_gpt(const char *spec, kn_gpt_config *c) {
    kn_gpt_config small = {65, 64, 2, 64, 4}, gpt2 = {50257, 1024, 12, 768, 12};
    *c = small;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "gpt2")) { *c = gpt2; continue; }
        if (!strcmp(tok, "small")) { *c = small; continue; }
        char *eq = strchr(tok, '=');
        char *end = NULL;
        long v = eq ? strtol(eq + 1, &end, 10) : 0;
        if (!eq || end == eq + 1 || *end || v < 1 || v > 1000000) {
            fprintf(stderr, "kiln compile: --gpt: bad item '%s' (want gpt2, small or key=value with a positive "
                    "integer value)\n", tok);
            return 2;
        }
        *eq = '\0';
        int *field = !strcmp(tok, "layers") ? &c->layers : !strcmp(tok, "width") ? &c->width
                   : !strcmp(tok, "heads") ? &c->heads : !strcmp(tok, "context") ? &c->context
                   : !strcmp(tok, "vocab") ? &c->vocab : NULL;
        if (!field) {
            fprintf(stderr, "kiln compile: --gpt: unknown key '%s' (keys: layers, width, heads, context, vocab)\n", tok);
            return 2;
        }
        *field = (int)v;
    }
    if (kn_gpt_config_check(c) != KN_OK) {
        fprintf(stderr, "kiln compile: --gpt %s: %s\n", spec, kn_last_error());
        return 2;
    }
    return 0;
}

static kn_status load_ir(const char *path, kn_graph **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return kn_error(KN_ERR_IO, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0;
    char *text = kn_malloc(cap);
    for (size_t k = 1; text && k > 0;) {
        if (n == cap) {
            char *t = kn_realloc(text, cap *= 2);
            if (!t) { kn_free(text); text = NULL; break; }
            text = t;
        }
        k = fread(text + n, 1, cap - n, f);
        n += k;
    }
    bool err = ferror(f);
    fclose(f);
    if (!text) return kn_error(KN_ERR_OOM, "out of memory reading %s", path);
    if (err) { kn_free(text); return kn_error(KN_ERR_IO, "cannot read %s", path); }
    kn_status st = kn_graph_parse(text, n, out);
    kn_free(text);
    if (st == KN_OK && (st = kn_graph_verify(*out)) != KN_OK) {
        kn_graph_free(*out);
        *out = NULL;
    }
    return st;
}

static void write_report(kn_json *j, const char *input, const char *passes, const kn_pass_report *rep,
                         const kn_graph *before, const kn_graph *after, bool checked, double delta, double build_ms,
                         double check_ms, double live_before, double live_after, const kn_program_stats *mem) {
    kn_cost c0 = kn_graph_cost(before), c1 = kn_graph_cost(after);
    kn_json_begin_object(j);
    kn_json_key(j, "input"); kn_json_string(j, input);
    kn_json_key(j, "passes_requested"); kn_json_string(j, passes);
    kn_json_key(j, "verified_after_each_pass"); kn_json_bool(j, rep->verified);
    kn_json_key(j, "passes"); kn_json_begin_array(j);
    for (int i = 0; i < rep->npasses; i++) {
        const kn_pass_stats *s = &rep->pass[i];
        kn_json_begin_object(j);
        kn_json_key(j, "name"); kn_json_string(j, rep->name[i]);
        if (s->arg[0]) { kn_json_key(j, "arg"); kn_json_string(j, s->arg); }
        kn_json_key(j, "nodes_before"); kn_json_int(j, s->nodes_before);
        kn_json_key(j, "nodes_after"); kn_json_int(j, s->nodes_after);
        kn_json_key(j, "ms"); kn_json_number(j, s->ms);
        kn_json_key(j, "fired"); kn_json_begin_object(j);
        for (int r = 0; r < s->nfired; r++) { kn_json_key(j, s->rule[r]); kn_json_int(j, s->count[r]); }
        kn_json_end_object(j);
        kn_json_end_object(j);
    }
    kn_json_end_array(j);
    kn_json_key(j, "nodes_before"); kn_json_int(j, rep->nodes_before);
    kn_json_key(j, "nodes_after"); kn_json_int(j, rep->nodes_after);
    kn_json_key(j, "passes_ms"); kn_json_number(j, rep->ms);
    kn_json_key(j, "build_ms"); kn_json_number(j, build_ms);
    kn_json_key(j, "check_ms"); kn_json_number(j, check_ms);
    kn_json_key(j, "flops_before"); kn_json_number(j, c0.flops);
    kn_json_key(j, "flops_after"); kn_json_number(j, c1.flops);
    kn_json_key(j, "bytes_before"); kn_json_number(j, c0.bytes);
    kn_json_key(j, "bytes_after"); kn_json_number(j, c1.bytes);
    kn_json_key(j, "live_bytes_before"); kn_json_number(j, live_before);
    kn_json_key(j, "live_bytes_after"); kn_json_number(j, live_after);
    kn_json_key(j, "max_abs_delta");
    if (checked) kn_json_number(j, delta); else kn_json_null(j);
    if (mem) { /* the compiled program's memory plan (when it was compiled: --memory-plot, --schedule, ...) */
        kn_json_key(j, "memory_plan"); kn_json_begin_object(j);
        kn_json_key(j, "buffers_bytes"); kn_json_number(j, mem->mem_sum);
        kn_json_key(j, "arena_bytes"); kn_json_number(j, mem->mem_planned);
        kn_json_key(j, "arena_bytes_without_inplace"); kn_json_number(j, mem->mem_planned_separate);
        kn_json_key(j, "inplace_saved_bytes"); kn_json_number(j, mem->mem_planned_separate - mem->mem_planned);
        kn_json_key(j, "inplace_values"); kn_json_int(j, mem->mem_inplace);
        kn_json_key(j, "inplace_value_bytes"); kn_json_number(j, mem->mem_inplace_bytes);
        kn_json_key(j, "lower_bound_bytes"); kn_json_number(j, mem->mem_lower);
        kn_json_end_object(j);
    }
    kn_json_end_object(j);
}

static int fail(const char *what) {
    fprintf(stderr, "kiln compile: %s%s%s\n", what, *what ? ": " : "", kn_last_error());
    return 1;
}

int kn_cli_compile(int argc, char **argv) {
    const char *file = NULL, *gpt = NULL, *passes = "all", *report = NULL, *emit = NULL, *graph_kind = "joint";
    long batch = 1, seq = 0;
    unsigned long long seed = 0;
    double tol = 1e-6;
    bool check = true, show_schedule = false, show_stages = false, keep_loss = false, sp = false;
    const char *kernels_dir = NULL, *memory_tsv = NULL, *dist = NULL, *mesh = NULL;
    long mesh_rank = 0;
    double bucket_mb = 25;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--no-check")) { check = false; continue; }
        if (!strcmp(a, "--schedule")) { show_schedule = true; continue; }
        if (!strcmp(a, "--stages")) { show_stages = true; continue; }
        if (!strcmp(a, "--keep-loss")) { keep_loss = true; continue; }
        if (!strcmp(a, "--sp")) { sp = true; continue; }
        if (a[0] != '-' || !a[1]) {
            if (file) { fprintf(stderr, "kiln compile: two input files: %s and %s\n", file, a); return 2; }
            file = a;
            continue;
        }
        static const char *const with_value[] = {"--gpt", "--graph", "--batch", "--seq", "--passes", "--report",
                                                 "--emit-ir", "--seed", "--tol", "--emit-kernels", "--memory-plot",
                                                 "--dist", "--bucket-mb", "--mesh", "--rank"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(a, with_value[k]);
        if (!known) { fprintf(stderr, "kiln compile: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "kiln compile: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "--gpt")) gpt = v;
        else if (!strcmp(a, "--graph")) graph_kind = v;
        else if (!strcmp(a, "--passes")) passes = v;
        else if (!strcmp(a, "--report")) report = v;
        else if (!strcmp(a, "--emit-ir")) emit = v;
        else if (!strcmp(a, "--emit-kernels")) kernels_dir = v;
        else if (!strcmp(a, "--memory-plot")) memory_tsv = v;
        else if (!strcmp(a, "--dist")) dist = v;
        else if (!strcmp(a, "--mesh")) mesh = v;
        else if (!strcmp(a, "--rank")) {
            mesh_rank = strtol(v, &end, 10);
            if (end == v || *end || mesh_rank < 0) { fprintf(stderr, "kiln compile: --rank '%s' is not an integer >= 0\n", v); return 2; }
        }
        else if (!strcmp(a, "--bucket-mb")) {
            bucket_mb = strtod(v, &end);
            if (end == v || *end || !(bucket_mb > 0)) { fprintf(stderr, "kiln compile: --bucket-mb '%s' is not a number > 0\n", v); return 2; }
        }
        else if (!strcmp(a, "--tol")) {
            tol = strtod(v, &end);
            if (end == v || *end || !(tol >= 0)) { fprintf(stderr, "kiln compile: --tol '%s' is not a number >= 0\n", v); return 2; }
        } else {
            long long x = strtoll(v, &end, 10);
            if (end == v || *end || x < (strcmp(a, "--seed") ? 1 : 0) || x > 1000000000) {
                fprintf(stderr, "kiln compile: %s '%s' is not a %s integer\n", a, v, strcmp(a, "--seed") ? "positive" : "non-negative");
                return 2;
            }
            if (!strcmp(a, "--batch")) batch = (long)x;
            else if (!strcmp(a, "--seq")) seq = (long)x;
            else seed = (unsigned long long)x;
        }
    }
    if (!file == !gpt) {
        fprintf(stderr, "kiln compile: give one input: an IR file or --gpt CONFIG\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(graph_kind, "joint") && strcmp(graph_kind, "forward")) {
        fprintf(stderr, "kiln compile: --graph '%s': use joint or forward\n", graph_kind);
        return 2;
    }
    char dist_passes[512];
    if (dist) { /* the data-parallel pass after the others: collectives are placed last */
        const char *pass = !strcmp(dist, "ddp") ? "ddp" : !strcmp(dist, "zero1") || !strcmp(dist, "zero2") ? "zero"
                           : !strcmp(dist, "zero3") || !strcmp(dist, "fsdp") ? "zero3" : NULL;
        if (!pass) {
            fprintf(stderr, "kiln compile: --dist '%s': expected ddp, zero1, zero2 or zero3 (also called fsdp)\n", dist);
            return 2;
        }
        bool none = !*passes || !strcmp(passes, "none");
        snprintf(dist_passes, sizeof dist_passes, "%s%s%s:%.9g", none ? "" : passes, none ? "" : ",", pass, bucket_mb);
        passes = dist_passes;
    }
    if (kn_passes_check(passes, NULL) != KN_OK) { fprintf(stderr, "kiln compile: %s\n", kn_last_error()); return 2; }
    kn_mesh m;
    if (sp && !mesh) { fprintf(stderr, "kiln compile: --sp goes with --mesh tp=N\n"); return 2; }
    if (mesh) {
        if (kn_mesh_parse(mesh, 0, &m) != KN_OK) { fprintf(stderr, "kiln compile: %s\n", kn_last_error()); return 2; }
        if (m.size[KN_MESH_DP] > 1 || m.size[KN_MESH_PP] > 1 || dist) {
            fprintf(stderr, "kiln compile: --mesh %s: only tp is placed so far (no dp, pp or --dist with it)\n", mesh);
            return 2;
        }
        if (mesh_rank >= m.size[KN_MESH_TP]) {
            fprintf(stderr, "kiln compile: --rank %ld: tp=%d has ranks 0..%d\n", mesh_rank, m.size[KN_MESH_TP],
                    m.size[KN_MESH_TP] - 1);
            return 2;
        }
    }
    kn_gpt_config cfg;
    if (gpt) {
        int rc = parse_gpt(gpt, &cfg);
        if (rc) return rc;
        if (seq == 0) seq = cfg.context;
        if (mesh && kn_mesh_check_gpt(&m, &cfg) != KN_OK) {
            fprintf(stderr, "kiln compile: %s\n", kn_last_error());
            return 2;
        }
        if (seq > cfg.context) {
            fprintf(stderr, "kiln compile: --seq %ld is longer than the context %d\n", seq, cfg.context);
            return 2;
        }
    }

    kn_graph *before = NULL, *after = NULL;
    double t0 = now_ms();
    kn_status st = gpt ? kn_gpt_graph(&cfg, (int)batch, (int)seq, !strcmp(graph_kind, "joint"), &before)
                       : load_ir(file, &before);
    double build_ms = now_ms() - t0;
    if (st != KN_OK) return fail(gpt ? "building the GPT graph" : file);
    if (kn_graph_copy(&after, before) != KN_OK) { kn_graph_free(before); return fail(""); }
    kn_pass_report rep;
    st = kn_passes_run_on(after, passes, kn_program_target_default(), &rep); /* as a program would */
    int rc = 0;
    if (st != KN_OK) rc = fail("");
    printf("%s: %d nodes -> %d after %s (%.1f ms)\n", gpt ? "gpt" : file, rep.nodes_before, rep.nodes_after, passes,
           rep.ms);
    for (int i = 0; i < rep.npasses; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s%s%s", rep.name[i], rep.pass[i].arg[0] ? ":" : "", rep.pass[i].arg);
        printf("  %-8s %6d -> %6d  %8.2f ms", label, rep.pass[i].nodes_before, rep.pass[i].nodes_after,
               rep.pass[i].ms);
        for (int r = 0; r < rep.pass[i].nfired; r++)
            printf("%s%s %lld", r ? ", " : "  ", rep.pass[i].rule[r], (long long)rep.pass[i].count[r]);
        printf("\n");
    }
    if (rc == 0 && dist) { /* where the pass placed the starts: the backward still to run after each */
        kn_overlap_room room;
        if (kn_dp_overlap_room(after, &room) == KN_OK)
            printf("collectives: %d buckets; when one starts, %.0f%% of the backward's %.3g FLOPs is still to run "
                   "on average (%.0f%% .. %.0f%%): the room to hide its communication\n", room.starts,
                   100 * room.mean, room.backward_flops, 100 * room.least, 100 * room.most);
    }
    double live0 = 0, live1 = 0; /* the largest live set in node order: what remat lowers */
    if (rc == 0 && (kn_graph_live_bytes(before, &live0, NULL) != KN_OK || kn_graph_live_bytes(after, &live1, NULL) != KN_OK))
        rc = fail("live bytes");
    if (rc == 0)
        printf("live bytes (largest live set in node order, not inputs, params or outputs): %.2f MB -> %.2f MB\n",
               live0 / 1e6, live1 / 1e6);
    double delta = 0, check_ms = 0;
    if (rc == 0 && check) {
        t0 = now_ms();
        st = kn_graph_compare(before, after, seed, &delta);
        check_ms = now_ms() - t0;
        if (st != KN_OK) rc = fail("checking the optimized graph");
        else {
            printf("max |delta| = %.3g on random inputs (seed %llu)\n", delta, seed);
            if (!(delta <= tol)) {
                fprintf(stderr, "kiln compile: the optimized graph differs: max |delta| %.3g > --tol %.3g\n", delta, tol);
                rc = 1;
            }
        }
    }
    if (rc == 0 && show_stages) { /* the whole pipeline, the passes inside it, on the original graph */
        kn_program_opts po = {.device = KN_CPU, .passes = passes, .mode = KN_PROGRAM_COMPILED, .keep_loss = keep_loss};
        kn_program *prog = NULL;
        st = kn_program_compile(&prog, before, &po);
        if (st == KN_OK) {
            printf("compile pipeline (%s):\n", passes);
            st = kn_program_print_stages(stdout, prog);
        }
        kn_program_free(prog);
        if (st != KN_OK) rc = fail("compiling to C");
    }
    kn_program_stats mem = {0};
    bool have_mem = false;
    if (rc == 0 && (show_schedule || kernels_dir || memory_tsv)) { /* the compiled program: fusion, generated C */
        kn_program_opts po = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .keep_loss = keep_loss};
        kn_program_stats ps;
        double rel = 0;
        kn_program *prog = NULL;
        st = kn_program_compile(&prog, after, &po);
        if (st == KN_OK && show_schedule) st = kn_program_print_kernels(stdout, prog);
        if (st == KN_OK && kernels_dir) st = kn_program_emit_kernels(prog, kernels_dir);
        if (st == KN_OK && memory_tsv) {
            FILE *f = fopen(memory_tsv, "w");
            st = f ? kn_program_memory_tsv(f, prog) : kn_error(KN_ERR_IO, "cannot write %s", memory_tsv);
            if (f && fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "cannot write %s", memory_tsv);
        }
        if (st == KN_OK && check) st = kn_program_compare(after, &po, seed, &rel, &ps);
        else if (st == KN_OK) ps = kn_program_get_stats(prog);
        if (st == KN_OK) { mem = ps; have_mem = true; }
        kn_program_free(prog);
        if (st != KN_OK) rc = fail("compiling to C");
        else {
            printf("compiled: %d steps (%d generated kernels, %d library) for %d computing nodes; %s in %.1f ms%s\n",
                   ps.nsteps, ps.nkernels, ps.nsteps - ps.nkernels, ps.nodes_computing, ps.mode == KN_PROGRAM_COMPILED ?
                   "C compiled" : "no C compiler: node by node", ps.compile_ms, ps.cached ? " (kernel cache hit)" : "");
            if (check) printf("compiled program against the interpreter: max |delta| / (1 + |ref|) = %.3g\n", rel);
            printf("memory plan: %.2f MB in one arena for buffers of %.2f MB in all; the most live at one step "
                   "(lower bound) %.2f MB\n", ps.mem_planned / 1e6, ps.mem_sum / 1e6, ps.mem_lower / 1e6);
            printf("in place: %d values (%.2f MB) written over an operand that died there; the arena without: "
                   "%.2f MB (saved %.2f MB)\n", ps.mem_inplace, ps.mem_inplace_bytes / 1e6,
                   ps.mem_planned_separate / 1e6, (ps.mem_planned_separate - ps.mem_planned) / 1e6);
            if (memory_tsv) printf("live bytes per step written to %s\n", memory_tsv);
            if (kernels_dir) printf("kernels written to %s\n", kernels_dir);
        }
    }
    kn_place_result placed = {0};
    if (rc == 0 && mesh) { /* the graph as captured, as kiln train --mesh places it */
        kn_placement outs[64];
        kn_tp_split split = {gpt ? cfg.vocab : 0, m.size[KN_MESH_TP]};
        kn_place_opts po = {.mesh = KN_MESH_TP, .parts = m.size[KN_MESH_TP], .rank = (int)mesh_rank,
                            .param = gpt ? kn_tp_gpt_param : NULL, .param_ctx = &split,
                            .flags = sp ? KN_PLACE_SEQUENCE_PARALLEL : 0};
        if (strcmp(graph_kind, "joint") != 0 || !gpt) { /* not loss + gradients: every output replicated */
            for (int i = 0; i < before->noutputs && i < 64; i++) outs[i] = kn_place_replicate();
            po.outputs = outs;
        }
        if (before->noutputs > 64 && po.outputs) st = kn_error(KN_ERR_ARG, "more than 64 outputs");
        else st = kn_place_graph(before, &po, &placed);
        if (st != KN_OK) rc = fail("--mesh");
        else {
            if (gpt && cfg.vocab % m.size[KN_MESH_TP] != 0)
                printf("mesh tp=%d: the vocabulary %d does not split: the token embedding and the logits stay "
                       "replicated\n", m.size[KN_MESH_TP], cfg.vocab);
            printf("mesh tp=%d: rank %ld's local graph %d nodes (the captured graph %d): %d all_reduce, %d all_gather, "
                   "%d reduce_scatter, %d local slices inserted; kn_place_check passed\n", m.size[KN_MESH_TP],
                   mesh_rank, placed.local->nnodes, before->nnodes, placed.all_reduce, placed.all_gather,
                   placed.reduce_scatter, placed.local_slices);
        }
    }
    if (rc == 0 && emit) {
        FILE *f = fopen(emit, "w");
        st = !f ? kn_error(KN_ERR_IO, "cannot write %s", emit) : mesh ? kn_place_print(f, &placed) : kn_graph_print(f, after);
        if (f && fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "cannot write %s", emit);
        if (st != KN_OK) rc = fail("--emit-ir");
    }
    if (rc == 0 && report) {
        kn_json j;
        kn_json_init_string(&j, true);
        write_report(&j, gpt ? gpt : file, passes, &rep, before, after, check, delta, build_ms, check_ms, live0, live1,
                     have_mem ? &mem : NULL);
        char *text = NULL;
        st = kn_json_finish(&j, &text);
        FILE *f = st == KN_OK ? fopen(report, "w") : NULL;
        if (st == KN_OK && (!f || fputs(text, f) < 0)) st = kn_error(KN_ERR_IO, "cannot write %s", report);
        if (f && fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "cannot write %s", report);
        kn_free(text);
        if (st != KN_OK) rc = fail("--report");
    }
    kn_place_result_free(&placed);
    kn_graph_free(before);
    kn_graph_free(after);
    return rc;
}
