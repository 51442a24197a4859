/* bench_attn.c — `kiln bench-attn`: attention alone, forward and backward.
 *
 * q, k, v [B, H, T, D] (params, so the joint graph has their gradients),
 * o = causal_softmax(q k^T / sqrt(D)) v, loss = sum(o * r) with a random r (so do = r: a
 * gradient of realistic size), compiled node by node on the device, materialized or with
 * the flash pass (--flash). Reported: the median time of a run (forward + backward), the
 * peak of kiln's allocations during the runs above what was live before them (the
 * inputs), and the graph's largest live set in node order. Its last line is one TSV row
 * (plots/flash.sh collects them): T, variant, median ms, peak bytes, live-set bytes, B, H,
 * D, device, precision. --tf32 allows TF32 tensor cores (cuBLAS and flash's mma kernels);
 * --precision bf16 adds autocast:bf16 and compiles the program. With --flash on a GPU it also
 * names the forward kernel that ran (kn_flash_cuda_fwd_kernel: v1 or v2, KILN_FLASH_FWD) and
 * times it alone: flash_attn's GPU time a call over --steps more runs under the per-op
 * profile, and its TFLOP/s. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/timing.h"
#include "kiln/autograd.h"
#include "kiln/device.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#if KN_HAVE_CUDA
#include "runtime/cuda_flash_tc.h"
#endif

typedef struct attn_opts {
    int batch, heads, dim, seq, warmup, steps;
    bool flash, tf32, bf16;
    bool bthd; /* --bthd: q, k, v (and r) [B, T, H, D], attention on their permutes (the GPT's layout) */
    char device[16];
} attn_opts;

static void attn_usage(FILE *f) {
    fprintf(f, "usage: kiln bench-attn [--batch B] [--heads H] [--head-dim D] [--seq T] [--warmup N] [--steps N]\n"
               "                       [--device auto|cpu|cuda|cuda:N] [--flash] [--tf32] [--precision fp32|bf16]\n"
               "                       [--bthd]\n"
               "Times causal attention alone, forward + backward (q, k, v [B, H, T, D] and their gradients),\n"
               "materialized (matmul, causal_softmax, matmul: [B, H, T, T] values) or with --flash (the flash\n"
               "pass: flash_attn and flash_attn_bwd). --tf32 (KILN_TF32=1) lets a GPU use TF32 tensor cores:\n"
               "cuBLAS's matmuls, and flash attention's mma kernels (D 32 or 64; others run the SIMT ones).\n"
               "--precision bf16 runs the autocast:bf16 pass after flash and compiles the program (the products\n"
               "in bf16 with f32 accumulation, flash attention's on bf16 tensor cores at D 64 and 128).\n"
               "--bthd lays q, k, v out as the GPT's projections do, [B, T, H, D], attention running on their\n"
               "permutes [0, 2, 1, 3] and its output permuted back: with --flash the pass then reads and writes\n"
               "that layout in place (flash_attn's perm; the variant is flash-bthd), without it the permutes copy.\n"
               "Defaults: B 8, H 12, D 64, T 1024, 2 warm-up and 5 timed runs, device auto. Prints the median\n"
               "time, the peak memory of the runs above the inputs, the graph's largest live set and, for flash\n"
               "on a GPU, the kernel that ran and the forward's (KILN_FLASH_FWD=v1|v2|v2-64 picks bf16 D 64's)\n"
               "with its GPU time a call and TFLOP/s; the last line is a TSV row: T, variant, ms, peak bytes, live\n"
               "bytes, B, H, D, device, precision (plots/flash.sh).\n");
}

static int attn_parse(attn_opts *o, int argc, char **argv) {
    *o = (attn_opts){.batch = 8, .heads = 12, .dim = 64, .seq = 1024, .warmup = 2, .steps = 5};
    snprintf(o->device, sizeof o->device, "auto");
    struct { const char *name; int *v; int lo; } ints[] = {
        {"--batch", &o->batch, 1}, {"--heads", &o->heads, 1}, {"--head-dim", &o->dim, 1}, {"--seq", &o->seq, 1},
        {"--warmup", &o->warmup, 0}, {"--steps", &o->steps, 1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { attn_usage(stdout); return 0; }
        if (!strcmp(a, "--flash")) { o->flash = true; continue; }
        if (!strcmp(a, "--tf32")) { o->tf32 = true; continue; }
        if (!strcmp(a, "--bthd")) { o->bthd = true; continue; }
        bool known = !strcmp(a, "--device") || !strcmp(a, "--precision");
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) known = known || !strcmp(a, ints[k].name);
        if (!known) { fprintf(stderr, "kiln bench-attn: unknown option '%s' (kiln bench-attn --help)\n", a); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "kiln bench-attn: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
                fprintf(stderr, "kiln bench-attn: --precision '%s': use fp32 or bf16 (--tf32 for TF32)\n", v);
                return 2;
            }
            o->bf16 = !strcmp(v, "bf16");
            continue;
        }
        if (!strcmp(a, "--device")) {
            if (strlen(v) >= sizeof o->device) { fprintf(stderr, "kiln bench-attn: --device '%s' is too long\n", v); return 2; }
            snprintf(o->device, sizeof o->device, "%s", v);
            continue;
        }
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].name) != 0) continue;
            char *end;
            errno = 0;
            long x = strtol(v, &end, 10);
            if (!*v || *end || errno || x < ints[k].lo || x > 1000000) {
                fprintf(stderr, "kiln bench-attn: %s '%s': expected an integer in [%d, 1000000]\n", a, v, ints[k].lo);
                return 2;
            }
            *ints[k].v = (int)x;
        }
    }
    return -1;
}

/* The joint graph of loss = sum(attention(q, k, v) * r); with --bthd of
 * sum(permute(attention(q', k', v')) * r), q' = permute(q) ([B, T, H, D] -> [B, H, T, D]). */
static kn_status attn_graph(const attn_opts *o, kn_graph **out) {
    int64_t s[4] = {o->batch, o->bthd ? o->seq : o->heads, o->bthd ? o->heads : o->seq, o->dim};
    const int p0213[4] = {0, 2, 1, 3};
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val q = kn_param_typed(b, "q", KN_DT_F32, 4, s), k = kn_param_typed(b, "k", KN_DT_F32, 4, s);
    kn_val v = kn_param_typed(b, "v", KN_DT_F32, 4, s), r = kn_input_typed(b, "r", KN_DT_F32, 4, s);
    kn_val qh = o->bthd ? kn_permute(b, q, 4, p0213) : q, kh = o->bthd ? kn_permute(b, k, 4, p0213) : k;
    kn_val vh = o->bthd ? kn_permute(b, v, 4, p0213) : v;
    kn_val p = kn_causal_softmax(b, kn_matmul_t(b, qh, kh, false, true), 1.0 / sqrt((double)o->dim));
    kn_val att = kn_matmul(b, p, vh);
    if (o->bthd) att = kn_permute(b, att, 4, p0213);
    kn_val loss = kn_sum(b, kn_mul(b, att, r), 0, NULL, false);
    kn_builder_output(b, loss);
    kn_graph *fwd = NULL;
    kn_status st = kn_builder_finish(b, &fwd);
    kn_builder_free(b);
    kn_val ps[3] = {q, k, v};
    if (st == KN_OK) st = kn_autograd(fwd, loss, 3, ps, out, NULL);
    kn_graph_free(fwd);
    return st;
}

#if KN_HAVE_CUDA
/* o->steps more runs of prog under the per-op profile; *ms: flash_attn's mean GPU time a
 * call (the profile's TSV rows of op flash_attn), *calls their count; *ms stays -1 where no
 * flash_attn ran. */
static kn_status flash_fwd_time(const attn_opts *o, kn_device dev, kn_program *prog, double *ms, long long *calls) {
    char *tsv = NULL, *rep = NULL;
    size_t ntsv = 0, nrep = 0;
    FILE *t = open_memstream(&tsv, &ntsv), *f = open_memstream(&rep, &nrep);
    kn_status st = t && f ? kn_device_profile_start(dev) : kn_error(KN_ERR_OOM, "kiln bench-attn: out of memory");
    for (int i = 0; st == KN_OK && i < o->steps; i++) st = kn_program_run(prog);
    if (st == KN_OK) st = kn_device_profile_report(dev, f, t, 0, 0, NULL);
    if (t) fclose(t);
    if (f) fclose(f);
    double sum = 0;
    long long n = 0;
    for (char *line = tsv, *next; st == KN_OK && line && *line; line = next) { /* key, op, calls, ms, ... */
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *op = strchr(line, '\t');
        if (!op || strncmp(op + 1, "flash_attn\t", 11) != 0) continue;
        char *end;
        long long c = strtoll(op + 12, &end, 10);
        double x = *end == '\t' ? strtod(end + 1, NULL) : 0;
        n += c, sum += x;
    }
    *calls = n;
    *ms = n > 0 ? sum / (double)n : -1;
    free(tsv);
    free(rep);
    return st;
}
#else
static kn_status flash_fwd_time(const attn_opts *o, kn_device dev, kn_program *prog, double *ms, long long *calls) {
    (void)o, (void)dev, (void)prog, (void)calls;
    *ms = -1; /* no CUDA in this build: no device runs flash_attn */
    return KN_OK;
}
#endif

static kn_status bench_attn(const attn_opts *o, kn_device dev) {
    kn_graph *g = NULL;
    kn_program *prog = NULL;
    kn_tensor *host[4] = {NULL}, *dv[4] = {NULL};
    double *ms = kn_calloc((size_t)o->steps, sizeof *ms), live = 0;
    static const char *const names[4] = {"q", "k", "v", "r"};
    int64_t s[4] = {o->batch, o->bthd ? o->seq : o->heads, o->bthd ? o->heads : o->seq, o->dim};
    kn_status st = ms ? attn_graph(o, &g) : kn_error(KN_ERR_OOM, "kiln bench-attn: out of memory");
    const char *passes = o->bf16 ? (o->flash ? "flash,autocast:bf16" : "autocast:bf16") : o->flash ? "flash" : NULL;
    if (st == KN_OK) st = kn_passes_live_bytes_on(g, passes, kn_program_target_default(), &live);
    kn_program_opts po = {.device = dev, .passes = passes, .mode = o->bf16 ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES};
    if (st == KN_OK) st = kn_program_compile(&prog, g, &po);
    kn_rng rng = kn_rng_new(7);
    for (int i = 0; st == KN_OK && i < 4; i++) {
        st = kn_tensor_randn(&host[i], KN_DT_F32, 4, s, &rng);
        if (st == KN_OK) st = kn_tensor_to(&dv[i], host[i], dev);
        if (st == KN_OK) st = kn_program_bind(prog, names[i], dv[i]);
    }
    kn_stopwatch w = {NULL, NULL};
    kn_device_mem_stats m0 = {0}, m1 = {0};
    for (int i = 0; st == KN_OK && i < o->warmup + o->steps; i++) {
        if (i == o->warmup) { /* the peak of the timed runs, above what is live now */
            st = kn_device_synchronize(dev);
            if (st == KN_OK) st = kn_device_mem_reset_peak(dev);
            if (st == KN_OK) st = kn_device_mem_stats_get(dev, &m0);
        }
        double t = 0;
        if (st == KN_OK) st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_program_run(prog);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &t);
        if (st == KN_OK && i >= o->warmup) ms[i - o->warmup] = t;
    }
    if (st == KN_OK) st = kn_device_mem_stats_get(dev, &m1);
    /* One more run with the device's per-op profile (what kiln bench --profile uses): the GPU
     * time of the ops alone, kernel-accurate, beside the wall time (which also holds launch
     * gaps and host work). Generated kernels (bf16's compiled program) are not ops: they
     * show in the report's "outside ops". */
    double gpu_ms = -1;
    char *rep = NULL;
    size_t replen = 0;
    if (st == KN_OK && dev.type == KN_DEVICE_CUDA) {
        FILE *mf = open_memstream(&rep, &replen);
        double t = 0;
        st = mf ? kn_device_profile_start(dev) : kn_error(KN_ERR_OOM, "kiln bench-attn: out of memory");
        if (st == KN_OK) st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_program_run(prog);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &t);
        if (st == KN_OK) st = kn_device_profile_report(dev, mf, NULL, t, 6, &gpu_ms);
        if (mf) fclose(mf);
    }
    /* The forward alone: flash_attn's GPU time over the timed runs' count of profiled runs
     * (the per-op profile's TSV), and its rate at the flops FlashAttention's benchmarks count
     * for a causal forward, 4 B H T^2 D / 2 (the masked half left out). */
    double fwd_ms = -1;
    long long fwd_calls = 0;
    if (st == KN_OK && o->flash && dev.type == KN_DEVICE_CUDA) st = flash_fwd_time(o, dev, prog, &fwd_ms, &fwd_calls);
    if (st == KN_OK) {
        char devname[32];
        kn_device_str(dev, devname, sizeof devname);
        const char *variant = o->flash ? (o->bthd ? "flash-bthd" : "flash") : o->bthd ? "materialized-bthd" : "materialized";
        double med = kn_median(ms, o->steps), peak = (double)m1.peak - (double)m0.current;
        const char *prec = o->bf16 ? "bf16" : o->tf32 && dev.type == KN_DEVICE_CUDA ? "tf32" : "f32";
        printf("kiln bench-attn: causal attention, B %d, H %d, T %d, D %d, %s, forward + backward, %s, on %s\n",
               o->batch, o->heads, o->seq, o->dim, prec, variant, devname);
        printf("  %.3f ms median of %d runs; peak %.2f MiB above the inputs; largest live set %.2f MiB\n", med,
               o->steps, peak / 1048576.0, live / 1048576.0);
        if (gpu_ms >= 0) printf("  %.3f ms GPU time of the ops of one profiled run (wall median %.3f ms):\n%s", gpu_ms, med, rep);
#if KN_HAVE_CUDA
        if (o->flash && dev.type == KN_DEVICE_CUDA) printf("  flash kernel: %s\n", kn_flash_cuda_kernel());
        if (fwd_ms > 0)
            printf("  flash forward: %s\n  flash forward: %.4f ms a call (GPU time, mean of %lld profiled calls), %.1f "
                   "TFLOP/s (4 B H T^2 D / 2 flops)\n", kn_flash_cuda_fwd_kernel(), fwd_ms, fwd_calls,
                   4.0 * o->batch * o->heads * (double)o->seq * o->seq * o->dim / 2 / (fwd_ms * 1e9));
#endif
        printf("%d\t%s\t%.4f\t%.0f\t%.0f\t%d\t%d\t%d\t%s\t%s\n", o->seq, variant, med, peak, live, o->batch, o->heads,
               o->dim, devname, prec);
    }
    kn_stopwatch_free(&w);
    free(rep); /* open_memstream's buffer */
    for (int i = 0; i < 4; i++) {
        kn_tensor_free(host[i]);
        kn_tensor_free(dv[i]);
    }
    kn_program_free(prog);
    kn_graph_free(g);
    kn_free(ms);
    return st;
}

int kn_cli_bench_attn(int argc, char **argv) {
    attn_opts o;
    int rc = attn_parse(&o, argc, argv);
    if (rc >= 0) return rc;
    kn_device dev;
    if (kn_device_parse(o.device, &dev) != KN_OK) {
        fprintf(stderr, "kiln bench-attn: --device: %s\n", kn_last_error());
        return 2;
    }
    if (o.tf32 && setenv("KILN_TF32", "1", 1) != 0) { /* read by the first matmul or flash kernel */
        fprintf(stderr, "kiln bench-attn: --tf32: cannot set KILN_TF32\n");
        return 1;
    }
    if (bench_attn(&o, dev) != KN_OK) {
        fprintf(stderr, "kiln bench-attn: %s\n", kn_last_error());
        return 1;
    }
    return 0;
}
