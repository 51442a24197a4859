/* train.c — `kiln train`: train a small GPT on the bundled corpus (or a text/token file)
 * on the CPU or a GPU (--device; a GPU by default when one is usable), show it learning,
 * evaluate, sample, and checkpoint; `--resume` continues a checkpoint exactly as the
 * uninterrupted run would have.
 *
 * Settings come from flags and/or a key=value config file (--config FILE, keys are the
 * flag names without "--"; later settings override earlier ones). Bad usage exits 2 with a
 * message naming the flag; a failure while running exits 1.
 *
 * Exact resume rests on three facts: the batch of step s is a pure function of (data
 * seed, s) (kn_batch_sample), the learning rate of step s is a pure function of the
 * schedule and s, and the checkpoint holds the parameters and optimizer state bit for bit.
 * So the run settings are saved in the checkpoint's metadata, and a resumed run takes
 * them from there: with --resume, only the options of this invocation (--out, --log,
 * --stop-after, --sample, --temperature, --eval-batches, --device, --mode, --remat, --flash, --epilogue, --hfuse,
 * --loss-scale) may be given (--remat recomputes activations without changing a bit of the
 * result; --flash computes attention without its [B, H, T, T] matrices, equal to rounding;
 * --epilogue puts bias, gelu and the bias gradient into the matmuls' library calls, exact on
 * the CPU and equal to rounding on a GPU; --hfuse merges the q, k, v products into one, equal to rounding;
 * the loss scaler's state and its skipped steps are in the checkpoint too). The data and
 * the checkpoint's metadata are train_data.c's.
 *
 * Data parallelism (train_dist.c): under `mpiexec -n N`, --dist ddp|zero1|zero2|zero3 runs one process per rank;
 * each rank's trainer takes batch / (N x --accum) rows of the same global batch, and the
 * step is kn_dp_step (core/dist/dp.c). Rank 0 alone prints, logs and writes checkpoints. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/train_impl.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/mesh.h"
#include "kiln/nn.h"
#include "kiln/offload.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/step.h"
#include "nn/train_opts.h"

/* Whether --mode auto runs the compiled program on a GPU: set from the benchmark, where
 * the compiled GPU step ran at 0.97x the node-by-node one (H100, TF32, GPT-2 shape:
 * plots/results/h100-2026-11-24/README.md). */
#define KN_AUTO_GPU_COMPILED 0

/* ---------------------------------------------------------------- the run */

static void print_sample(const kn_train_opts *o, const kn_gpt *g, const kn_train_data *d) {
    if (o->sample <= 0) return;
    int n = o->sample + 1;
    int32_t *ids = kn_malloc((size_t)n * sizeof *ids);
    uint8_t *text = kn_malloc((size_t)n + 1);
    if (!ids || !text) { kn_free(ids); kn_free(text); return; }
    /* prompt: a newline (a paragraph starts) when the vocabulary has one */
    ids[0] = d->has_tok && d->tok.byte_to_id['\n'] >= 0 ? d->tok.byte_to_id['\n'] : 0;
    kn_rng rng = kn_rng_split(&(kn_rng){.seed = o->seed}, 7);
    kn_status st = kn_gpt_sample(g, ids, 1, n, o->temperature, &rng);
    if (st != KN_OK) {
        fprintf(stderr, "kiln train: sampling failed: %s\n", kn_last_error());
    } else if (d->has_tok && kn_tokenizer_decode(&d->tok, ids + 1, (size_t)o->sample, text) == KN_OK) {
        text[o->sample] = '\0';
        printf("\nsample (%d characters, temperature %g):\n%s\n", o->sample, o->temperature, (char *)text);
    } else {
        printf("\nsample (token ids):");
        for (int i = 1; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
    }
    kn_free(ids);
    kn_free(text);
}

static kn_status evaluate(const kn_train_opts *o, kn_trainer *tr, const kn_train_data *d, double *loss) {
    size_t bt = (size_t)o->batch * (size_t)o->context;
    int32_t *x = kn_malloc(bt * sizeof *x), *y = kn_malloc(bt * sizeof *y);
    kn_status st = x && y ? KN_OK : kn_error(KN_ERR_OOM, "out of memory");
    double sum = 0;
    for (int e = 0; st == KN_OK && e < o->eval_batches; e++) {
        double l = 0;
        st = kn_batch_sample(d->tokens + d->n_train, d->n - d->n_train, o->batch, o->context, o->seed, 1, e, x, y);
        /* in chunks of the trainer's rows (fewer than --batch under --dist) */
        for (int c = 0; st == KN_OK && c < o->batch / tr->B; c++) {
            double lc = 0;
            size_t off = (size_t)c * (size_t)tr->B * (size_t)o->context;
            st = kn_trainer_eval(tr, x + off, y + off, &lc);
            l += lc / (o->batch / tr->B);
        }
        sum += l;
    }
    kn_free(x);
    kn_free(y);
    if (st == KN_OK) *loss = o->eval_batches > 0 ? sum / o->eval_batches : NAN;
    return st;
}

/* ---------------------------------------------------------------- loss scaling */

/* --loss-scale: the trainer's scaler (kiln/optim.h), after the trainer has its device and
 * mode and before --dist attaches (every rank then starts from the same scale, and the step
 * runner keeps them equal: one overflow decision for all ranks); on resume its scale (dynamic) and clean streak continue from the checkpoint
 * ("kiln.loss_scale": scale, good steps, skipped; the skip count was restored already).
 * `auto` is dynamic only for fp16, which kiln train does not run yet: so far it is none. */
static kn_status loss_scale_attach(const kn_train_opts *o, kn_trainer *tr, const char *saved) {
    kn_loss_scaler s;
    KN_TRY(kn_loss_scaler_parse(o->loss_scale, !strcmp(o->precision, "fp16"), &s)); /* auto: dynamic for fp16 */
    if (s.mode == KN_LOSS_SCALE_NONE) return KN_OK;
    double scale;
    long long good, skipped;
    if (saved && sscanf(saved, "%lg %lld %lld", &scale, &good, &skipped) == 3) {
        s.good_steps = good;
        if (s.mode == KN_LOSS_SCALE_DYNAMIC && scale >= s.min_scale && scale <= s.max_scale) s.scale = scale;
    }
    s.skipped = tr->scaler.skipped;
    return kn_trainer_set_loss_scale(tr, &s);
}

/* KILN_INJECT_INF_STEP=N[,N...]: the steps (of the run, 0-based) whose gradients get an
 * inf (kn_trainer.inject_inf): a test of the loss scaler from the command line. Under
 * --dist, KILN_INJECT_INF_RANK=R plants it on rank R only (default: every rank): the
 * other ranks must skip the step all the same. */
static bool inject_at(int64_t step, int rank) {
    const char *r = getenv("KILN_INJECT_INF_RANK");
    if (r && *r && atoi(r) != rank) return false;
    const char *v = getenv("KILN_INJECT_INF_STEP");
    for (char *end; v && *v; v = *end ? end + 1 : end) {
        long long n = strtoll(v, &end, 10);
        if (end == v) return false;
        if (n == step) return true;
    }
    return false;
}

/* kn:region precision */
/* --precision: the pass list of the programs (autocast, lowparams, lowloss and lowsave for
 * bf16 and fp16, then remat:P when
 * remat is not NULL) into list; tf32 sets KILN_TF32 for the GPU's matmuls. bf16 and fp16
 * run on the CPU (compiled and interpreted) and, compiled, on a GPU (generated kernels and
 * cuBLAS in 16 bits); the GPU's node-by-node kernels are f32/f64, so a GPU refuses --mode
 * interp here rather than deep in a step. */
static kn_status precision_passes(const kn_train_opts *o, kn_device dev, const char *remat, char *list, size_t cap) {
    bool low = !strcmp(o->precision, "bf16") || !strcmp(o->precision, "fp16");
    if (low && dev.type != KN_DEVICE_CPU && strcmp(o->mode, "compiled"))
        return kn_error(KN_ERR_UNSUPPORTED, "--precision %s on a GPU runs the compiled program (generated kernels and "
                        "cuBLAS in %s); the node-by-node GPU kernels are f32/f64: add --mode compiled", o->precision,
                        o->precision);
    if (!strcmp(o->precision, "tf32") && dev.type != KN_DEVICE_CPU && setenv("KILN_TF32", "1", 1) != 0)
        return kn_error(KN_ERR_IO, "--precision tf32: cannot set KILN_TF32");
    /* the optimizer writes the weights' low copies (lowparams), but ZeRO-3's ranks hold a
     * shard of the weights, gathered bucket by bucket: there the step casts them itself */
    bool copies = low && strcmp(o->dist, "zero3") != 0 && !o->mesh[0]; /* --mesh: kn_tp's shards, cast in-step too */
    if (low) snprintf(list, cap, "autocast:%s%s%s,lowloss,lowsave%s%s", o->precision, copies ? ",lowparams:" : "",
                      copies ? o->precision : "", remat ? "," : "", remat ? remat : "");
    else snprintf(list, cap, "%s", remat ? remat : "");
    return KN_OK;
}

/* One line saying what the precision means on this device. */
static void precision_note(const kn_train_opts *o, kn_device dev) {
    if (!strcmp(o->precision, "tf32"))
        printf("  precision tf32: %s\n", dev.type == KN_DEVICE_CPU ? "the CPU has no TF32: its matmuls are fp32, the "
               "same as --precision fp32" : "fp32 values, matmuls on TF32 tensor cores (KILN_TF32=1)");
    else if (!strcmp(o->precision, "bf16"))
        printf("  precision bf16: matmuls in bf16 (f32 accumulation), reductions, norms, softmax and the loss in "
               "fp32 (the autocast pass); master weights fp32\n");
    else if (!strcmp(o->precision, "fp16"))
        printf("  precision fp16: as bf16 with fp16 (autocast:fp16); %s\n",
               o->loss_scale[0] && strcmp(o->loss_scale, "none")
                   ? "the loss is scaled (--loss-scale) so that small gradients do not flush to zero"
                   : "no loss scaling (--loss-scale none): gradients below 6e-8 flush to zero");
}
/* kn:endregion precision */

static int run(kn_train_opts *o, kn_device dev, kn_train_dist *rd) {
    kn_train_data d;
    kn_gpt g = {0};
    kn_trainer tr = {0};
    kn_safetensors ck = {0};
    kn_offload *off = NULL;
    bool have_ck = false;
    int64_t start = 0;
    int rc = 1;
    if (kn_train_data_load(o, &d) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 1;
    }
    kn_gpt_config mc = {.vocab = d.vocab, .context = o->context, .layers = o->layers, .width = o->width,
                        .heads = o->heads};
    kn_optim_config oc = kn_train_opts_optim(o);
    if (kn_gpt_new(&g, &mc) != KN_OK) goto fail;
    kn_gpt_init(&g, o->seed);
    if (!rd->on && o->batch % o->accum != 0) {
        kn_error(KN_ERR_ARG, "--batch %d is not divisible by --accum %d: the micro-batches are equal shares of the batch",
                 o->batch, o->accum);
        goto fail;
    }
    if (kn_trainer_new(&tr, &g, rd->on || rd->tp_on ? rd->rows : o->batch / o->accum, o->context, &oc, o->clip) != KN_OK)
        goto fail;
    tr.eager = !strcmp(o->mode, "eager");
    /* --flash, --remat: passes on the step's joint graph, applied when the programs are compiled for
     * their device and mode below (the eval program's forward graph has no backward: the
     * pass leaves it alone). flash first (remat then sees flash_attn, and autocast runs it
     * in bf16 where the GPU has a tensor-core kernel for its head dim), then --precision
     * bf16|fp16's autocast, then remat. */
    /* --epilogue's pass goes after autocast (it takes the 16-bit products' casts in) and
     * before remat (which never recomputes a product); --hfuse's before it (it sees the casts
     * autocast and lowparams leave between the weight's slices and their products). */
    char remat[64], prec[64], passes[288] = "";
    snprintf(remat, sizeof remat, "remat:%s", o->remat);
    bool remat_on = strcmp(o->remat, "none") != 0;
    if (precision_passes(o, dev, NULL, prec, sizeof prec) != KN_OK) goto fail;
    /* --passes first: the generic cleanups (lab 04's) on the joint graph as recorded */
    const char *parts[6] = {strcmp(o->passes, "none") ? o->passes : "", o->flash ? "flash" : "", prec,
                            o->hfuse ? "hfuse" : "", o->epilogue ? "epilogue" : "", remat_on ? remat : ""};
    for (int i = 0; i < 6; i++)
        if (parts[i][0]) snprintf(passes + strlen(passes), sizeof passes - strlen(passes), "%s%s", passes[0] ? "," : "", parts[i]);
    if (passes[0]) tr.passes = passes;
    remat_on |= o->flash != 0 || o->epilogue != 0 || o->hfuse != 0;
    if (o->resume[0]) {
        if (kn_checkpoint_load(o->resume, &g, &tr.opt, &ck) != KN_OK) goto fail;
        have_ck = true;
        char hex[600];
        const char *want = kn_safetensors_meta(&ck, "kiln.tokenizer");
        kn_train_tok_hex(&d, hex);
        long long s = -1;
        const char *sv = kn_safetensors_meta(&ck, "kiln.train.step");
        if (sv) s = strtoll(sv, NULL, 10);
        const char *ls = kn_safetensors_meta(&ck, "kiln.loss_scale");
        long long skipped = 0;
        if (ls && sscanf(ls, "%*g %*d %lld", &skipped) != 1) skipped = -1;
        tr.scaler.skipped = skipped; /* skipped steps ran but did not count as optimizer steps */
        if (!want || strcmp(want, hex) != 0) {
            kn_error(KN_ERR_ARG, "%s: the checkpoint's tokenizer differs from the data's (different --data?)", o->resume);
            goto fail;
        }
        if (s < 0 || s > o->steps || skipped < 0 || s != tr.opt.step + skipped) {
            kn_error(KN_ERR_FORMAT, "%s: kiln.train.step %lld does not fit %lld steps / optimizer step %lld + %lld "
                     "skipped", o->resume, s, (long long)o->steps, (long long)tr.opt.step, skipped);
            goto fail;
        }
        start = s;
    }
    if (dev.type != KN_DEVICE_CPU) {
        if (tr.eager) {
            kn_error(KN_ERR_ARG, "--mode %s runs on the CPU only: use --mode compiled, interp or auto on --device %s",
                     o->mode, o->device);
            goto fail;
        }
        if (kn_trainer_to_device(&tr, dev) != KN_OK) goto fail;
    }
    /* auto: the fastest that is correct on the device: generated C on the CPU (1.3x the
     * interpreter on the default model), node by node on a GPU (KN_AUTO_GPU_COMPILED) */
    /* emu: the CPU's compiled program with the kernels rendered as CUDA and run by the CUDA
     * emulator (kn_program_opts.cuda_emu): lab 07's units on the training step, no GPU */
    tr.cuda_emu = !strcmp(o->mode, "emu");
    if (tr.cuda_emu && dev.type != KN_DEVICE_CPU) {
        kn_error(KN_ERR_ARG, "--mode emu runs the CUDA kernels under the CPU's emulator: use it with --device cpu "
                 "(or auto), not --device %s", o->device);
        goto fail;
    }
    if (!strcmp(o->mode, "compiled") || tr.cuda_emu || (!strcmp(o->mode, "auto") && (dev.type == KN_DEVICE_CPU || KN_AUTO_GPU_COMPILED))) {
        kn_status cs = kn_trainer_set_compiled(&tr, true);
        if (cs == KN_ERR_NOT_IMPLEMENTED && !strcmp(o->mode, "auto")) { /* a lab 05 skeleton: say so, interpret */
            fprintf(stderr, "kiln train: the compiled program is not available (%s); running --mode interp\n",
                    kn_last_error());
            cs = kn_trainer_set_compiled(&tr, false);
        }
        if (cs != KN_OK) goto fail;
    } else if (tr.passes && dev.type == KN_DEVICE_CPU && kn_trainer_set_compiled(&tr, false) != KN_OK) {
        goto fail; /* --mode interp: recompile node by node, now with the pass */
    }
    if (loss_scale_attach(o, &tr, have_ck ? kn_safetensors_meta(&ck, "kiln.loss_scale") : NULL) != KN_OK)
        goto fail;
    if (!strcmp(o->cuda_graph, "on")) {
        if (dev.type != KN_DEVICE_CUDA || !tr.compiled) {
            kn_error(KN_ERR_ARG, "--cuda-graph on replays the compiled GPU step: use it with --mode compiled on a GPU "
                     "(here: --mode %s on %s)", o->mode, o->device);
            goto fail;
        }
        /* data parallelism's collectives go into the graph where each is queued in stream
         * order and the same in every run (kn_dp_collectives' `graph`) */
        const char *why = !o->dist[0] ? NULL
                          : o->mesh[0] || o->pp > 0 ? "the mesh's collectives wait on the host"
                          : strcmp(o->comm, "nccl") ? "MPI's collectives wait on the host (use --comm nccl)"
                          : !strcmp(o->dist, "zero3") || !strcmp(o->dist, "fsdp")
                              ? "ZeRO-3 supplies the parameters during the run (their gathers)"
                          : !strcmp(o->dist, "zero2") ? "ZeRO-2 makes its buckets' staging buffers during the run"
                          : o->accum > 1 ? "--accum runs the step's program once per micro-batch, and only the "
                                           "last communicates"
                          : !strcmp(o->allreduce, "ring") ? "kiln's ring all-reduce is blocking host code"
                          : strcmp(o->compress, "none") && o->compress[0] ? "int8 compression codes on the host"
                                                                          : NULL;
        if (why) {
            kn_error(KN_ERR_ARG, "--cuda-graph on with --dist %s: %s, which a graph cannot replay; use one or the "
                     "other", o->dist, why);
            goto fail;
        }
        tr.cuda_graph = true;
        if (kn_program_set_cuda_graph(tr.prog, true) != KN_OK) goto fail;
    }
    /* --accum without --dist: the step runner sums the micro-batches' gradients itself */
    if (!rd->on && o->accum > 1 && kn_step_set_comm(&tr, NULL, o->accum) != KN_OK) goto fail;
    if (kn_train_dist_attach(o, rd, &tr) != KN_OK) goto fail;
    if (kn_train_tp_attach(o, rd, &tr) != KN_OK) goto fail;
    if (kn_train_offload_attach(o, rd, &tr, &off) != KN_OK) goto fail; /* --offload optimizer */
    /* the peak reported at the end is the training steps' (ZeRO has freed what it shards) */
    if (kn_device_mem_reset_peak(dev) != KN_OK) goto fail;
    int64_t end = o->stop_after > 0 && o->stop_after < o->steps ? o->stop_after : o->steps;
    if (end < start) {
        kn_error(KN_ERR_ARG, "--stop-after %lld: the checkpoint is already at step %lld", (long long)o->stop_after,
                 (long long)start);
        goto fail;
    }
    kn_lr_schedule sched = {.lr = o->lr, .min_lr = o->min_lr, .warmup = o->warmup, .total = o->steps};
    printf("kiln train: GPT %d layers, width %d, %d heads, context %d, vocab %d: %lld parameters\n", o->layers,
           o->width, o->heads, o->context, d.vocab, (long long)g.p.n);
    printf("  data %s: %lld tokens (%lld train, %lld held out); unigram baseline %.4f nats/token (%.3f bits)\n",
           o->data, (long long)d.n, (long long)d.n_train, (long long)(d.n - d.n_train), d.unigram,
           d.unigram / log(2.0));
    printf("  %s, batch %d x %d, steps %lld..%lld of %lld, lr %g (warm-up %lld, cosine to %g), seed %llu, %s mode on %s\n",
           oc.kind == KN_OPTIM_SGD ? "SGD" : "AdamW", o->batch, o->context, (long long)start, (long long)end,
           (long long)o->steps, o->lr, (long long)o->warmup, o->min_lr, (unsigned long long)o->seed,
           tr.eager ? "eager" : tr.cuda_emu ? "emu (compiled to CUDA, under the emulator)" :
           kn_program_get_stats(tr.prog).mode == KN_PROGRAM_COMPILED ? "compiled" : "interp",
           o->device);
    precision_note(o, dev);
    bool scaled = tr.scaler.mode != KN_LOSS_SCALE_NONE;
    if (scaled) {
        char how[160];
        kn_loss_scaler_describe(&tr.scaler, how, sizeof how);
        printf("  loss scale %s; the log gets 'scale skipped' columns\n", how);
    }
    if (remat_on) {
        double live0 = 0, live1 = 0;
        char prec[32] = ""; /* the live sets after the precision's pass (autocast) alone, and after all */
        const char *ac = strstr(tr.passes, "autocast:");
        if (ac) snprintf(prec, sizeof prec, "%.*s", (int)strcspn(ac, ","), ac);
        if (kn_passes_live_bytes_on(tr.joint, prec[0] ? prec : NULL, kn_program_target_default(), &live0) != KN_OK ||
            kn_passes_live_bytes_on(tr.joint, tr.passes, kn_program_target_default(), &live1) != KN_OK)
            goto fail;
        if (!o->flash && !o->epilogue && !o->hfuse)
            printf("  remat %s: the step's largest live set %.2f MB (%.2f MB without recompute)\n", o->remat,
                   live1 / 1e6, live0 / 1e6);
        else
            printf("  passes %s: the step's largest live set %.2f MB (%.2f MB without them)\n", tr.passes, live1 / 1e6,
                   live0 / 1e6);
    }
    fflush(stdout);

    FILE *log = NULL;
    if (o->log[0] && !(log = fopen(o->log, start > 0 ? "a" : "w"))) {
        kn_error(KN_ERR_IO, "--log %s: cannot open: %s", o->log, strerror(errno));
        goto fail;
    }
    size_t bt = (size_t)o->batch * (size_t)o->context;
    int32_t *x = kn_malloc(bt * sizeof *x), *y = kn_malloc(bt * sizeof *y);
    if (!x || !y) {
        kn_free(x); kn_free(y);
        if (log) fclose(log);
        kn_error(KN_ERR_OOM, "out of memory for a batch");
        goto fail;
    }
    kn_progress bar;
    kn_progress_begin_file(&bar, rd->rank == 0 ? stderr : NULL, "train", end - start);
    double t0 = kn_time_now(), first_loss = NAN, recent = 0;
    int nrecent = 0;
    /* the steady rate leaves out the first steps (allocator, library handles, caches warm) */
    int64_t warm_steps = end - start > 8 ? 3 : 0;
    double t_warm = t0;
    kn_status st = KN_OK;
    /* a skeleton met before the steps was already handled (auto mode's fallback to interp) */
    bool skeleton_before = kn_not_implemented_seen() != NULL;
    for (int64_t s = start; s < end && st == KN_OK; s++) {
        double loss = 0, gn = 0, lr = kn_lr_at(&sched, s);
        st = kn_batch_sample(d.tokens, d.n_train, o->batch, o->context, o->seed, 0, s, x, y);
        tr.inject_inf = inject_at(s, rd->rank);
        if (st == KN_OK)
            st = rd->pp_on   ? kn_pp_step(&rd->pp, x, y, o->batch, lr, &loss, &gn)
                 : rd->on    ? kn_dp_step(&rd->dp, x, y, o->batch, lr, &loss, &gn)
                 : rd->tp_on ? kn_tp_step(&rd->tp, x, y, lr, &loss, &gn)
                             : kn_trainer_step(&tr, x, y, lr, &loss, &gn);
        /* a skeleton unit that returns nothing (lab 06's GEMM) left garbage: stop, saying whose */
        if (st == KN_OK && !skeleton_before && kn_not_implemented_seen())
            st = kn_error(KN_ERR_NOT_IMPLEMENTED, "step %lld called a skeleton unit, whose results are garbage: %s",
                          (long long)s, kn_not_implemented_seen());
        if (st != KN_OK) break;
        if (s == start) first_loss = loss;
        if (s + 1 == start + warm_steps) t_warm = kn_time_now();
        if (end - s <= 20) { recent += loss; nrecent++; }
        if (log && scaled)
            fprintf(log, "%lld %.17g %.17g %.17g %.17g %d\n", (long long)s, loss, lr, gn, tr.scaler.scale, tr.skipped);
        else if (log)
            fprintf(log, "%lld %.17g %.17g %.17g\n", (long long)s, loss, lr, gn);
        double el = kn_time_now() - t0, tps = el > 0 ? (double)(s - start + 1) * (double)bt / el : 0;
        char extra[96];
        snprintf(extra, sizeof extra, "step %lld  loss %.3f  %.1fk tok/s", (long long)s + 1, loss, tps / 1000);
        kn_progress_update(&bar, s - start + 1, extra);
    }
    kn_progress_end(&bar, NULL);
    double secs = kn_time_now() - t0;
    kn_free(x);
    kn_free(y);
    if (log) fclose(log);
    if (st != KN_OK) goto fail;
    /* the steps' peak, before gathering ZeRO's state (or the offload's) for the checkpoint */
    kn_device_mem_stats ms;
    bool have_ms = dev.type != KN_DEVICE_CPU && kn_device_mem_stats_get(dev, &ms) == KN_OK;
    if (off && kn_offload_sync(off) != KN_OK) goto fail; /* the host state where checkpoints read it */
    /* evaluation, the checkpoint and the sample read the whole model and state: ZeRO's
     * shards are gathered first (on the trainer's device; ZeRO-3's parameters too), then
     * copied to the host */
    if (rd->on && (rd->pp_on ? kn_pp_gather(&rd->pp) : kn_dp_gather_state(&rd->dp)) != KN_OK) goto fail;
    if (rd->tp_on && kn_tp_gather_state(&rd->tp) != KN_OK) goto fail;
    double val = NAN;
    if (evaluate(o, &tr, &d, &val) != KN_OK) goto fail;
    if (kn_trainer_sync_host(&tr) != KN_OK) goto fail;
    printf("\n  %lld steps in %.1f s (%.0f tokens/s)\n", (long long)(end - start), secs,
           secs > 0 ? (double)(end - start) * (double)bt / secs : 0.0);
    if (warm_steps > 0 && t0 + secs > t_warm)
        printf("  steady rate           %.0f tokens/s over the last %lld steps (global batch %d x %d)\n",
               (double)(end - start - warm_steps) * (double)bt / (t0 + secs - t_warm),
               (long long)(end - start - warm_steps), o->batch, o->context);
    if (have_ms)
        printf("  device memory peak    %.2f GB allocated by kiln during the steps (%.2f GB held from the driver)%s\n",
               (double)ms.peak / 1e9, (double)ms.peak_reserved / 1e9, rd->on ? ", on rank 0" : "");
    if (have_ms) /* to the byte: the offload check compares two runs (tests/dist/test_offload_gpu.sh) */
        printf("  device peak (bytes)   %zu\n", ms.peak);
    printf("  unigram baseline      %.4f nats/token\n", d.unigram);
    if (end > start)
        printf("  train loss            %.4f at the first step, %.4f over the last %d steps\n", first_loss,
               recent / nrecent, nrecent);
    if (scaled)
        printf("  loss scale            %g at the end; %lld step%s skipped (inf/NaN gradients) in all\n", tr.scaler.scale,
               (long long)tr.scaler.skipped, tr.scaler.skipped == 1 ? "" : "s");
    printf("  held-out loss         %.4f nats/token (%d batches)%s\n", val, o->eval_batches,
           val < d.unigram ? "  -> below the unigram baseline" : "  -> NOT below the unigram baseline");
    kn_train_dist_report(rd, g.p.n);
    kn_train_offload_report(off);
    if (rd->pp_on) kn_train_pp_report(o, rd);
    if (strcmp(o->out, "none") != 0 && rd->rank == 0) {
        if (kn_train_save(o, &tr, &d, end) != KN_OK) goto fail;
        printf("  checkpoint            %s (step %lld of %lld%s)\n", o->out, (long long)end, (long long)o->steps,
               end < o->steps ? "; continue with --resume" : "");
    }
    print_sample(o, &g, &d);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "kiln train: %s\n", kn_last_error());
    if (have_ck) kn_safetensors_free(&ck);
    kn_offload_free(off); /* before the trainer and the strategy it serves */
    if (rd->pp_on) kn_pp_free(&rd->pp);
    else if (rd->on) kn_dp_free(&rd->dp);
    else if (rd->tp_on) kn_tp_free(&rd->tp); /* its hooks are the trainer's: gone before it */
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    kn_free(d.tokens);
    return rc;
}

/* --device: "auto" (the first GPU when one is usable and the mode allows it, else the
 * CPU), "cpu", "cuda" or "cuda:N". Returns 0 with *dev set, 2 after a usage error, 1 when the GPU asked for
 * cannot be used (the backend's reason is printed). */
static int pick_device(kn_train_opts *o, kn_device *dev) {
    if (kn_device_parse(o->device, dev) != KN_OK) {
        fprintf(stderr, "kiln train: --device: %s\n", kn_last_error());
        return 2;
    }
    if (!strcmp(o->device, "auto")) {
        if (!strcmp(o->mode, "eager") || !strcmp(o->mode, "emu")) *dev = KN_CPU; /* the CPU-only modes */
        kn_device_str(*dev, o->device, sizeof o->device);
        return 0;
    }
    if (kn_device_check("kiln train", *dev) != KN_OK) {
        fprintf(stderr, "kiln train: --device %s: no usable device (%s); use --device cpu\n", o->device,
                kn_last_error());
        return 1;
    }
    return 0;
}

/* --offload optimizer: what cannot work is refused before MPI starts (every rank alike,
 * exit 2), the library refuses it again (kiln/offload.h). Returns -1 to go on. */
static int offload_check(const kn_train_opts *o) {
    bool on = false;
    if (kn_offload_parse(o->offload, &on) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    if (!on) return -1;
    /* KILN_OFFLOAD_ON_CPU=1: CPU training offloads too, the same arithmetic with plain copies:
     * tests/dist/test_offload_cli.sh checks the wiring without a GPU (bit for bit) */
    const char *test = getenv("KILN_OFFLOAD_ON_CPU");
    bool cpu = (!test || strcmp(test, "1") != 0) && (!strcmp(o->device, "cpu") || !strcmp(o->mode, "eager") || !strcmp(o->mode, "emu") ||
               (o->dist[0] && strcmp(o->comm, "nccl") != 0) ||
               (!strcmp(o->device, "auto") && kn_device_count(KN_DEVICE_CUDA) == 0));
    const char *why = cpu ? "it moves a GPU's optimizer state and step to the host, and CPU training (--device cpu, "
                            "--comm mpi ranks, --mode eager or emu, or auto without a GPU) has them there already: "
                            "drop --offload, or train on a GPU"
                      : o->mesh[0] || o->pp > 0 || o->sp ? "pipeline and tensor parallel meshes (--mesh, --pp) step "
                                                           "their own parts; it offloads one process or --dist ddp, "
                                                           "zero1, zero2"
                      : !strcmp(o->dist, "zero3") || !strcmp(o->dist, "fsdp")
                          ? "ZeRO-3's update writes the parameter shard its gathers read, which the host step does "
                            "not handle yet (use --dist zero1 or zero2: the sharded optimizer state is offloaded)"
                          : NULL;
    if (!why) return -1;
    fprintf(stderr, "kiln train: --offload optimizer: %s\n", why);
    return 2;
}

int kn_cli_train(int argc, char **argv) {
    kn_train_opts o;
    int rc = kn_train_opts_parse(&o, argc, argv);
    if (rc >= 0) return rc; /* --help (0) or bad usage (2) */
    if ((rc = offload_check(&o)) >= 0) return rc;
    kn_train_dist rd;
    if ((rc = kn_train_dist_begin(&o, &rd)) >= 0) {
        if (rd.on || rd.tp_on) kn_dist_finalize(); /* every rank made the same decision */
        return rc;
    }
    kn_device dev;
    rc = pick_device(&o, &dev);
    if (rc == 0) rc = run(&o, dev, &rd);
    if (rc != 0 && (rd.on || rd.tp_on) && rd.size > 1) kn_dist_abort(rc); /* a failing rank ends the job, not a hang */
    kn_train_dist_end(&rd);
    return rc;
}
