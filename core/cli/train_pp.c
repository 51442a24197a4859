/* train_pp.c — pipeline parallelism for `kiln train` (--pp N --schedule gpipe|1f1b|interleaved
 * --microbatches M [--chunks V] [--timeline FILE] under `mpiexec -n N`, or --mesh pp=N, or
 * --mesh dp=D,pp=N under `mpiexec -n D*N`: D pipelines on equal shares of the batch, their
 * stages' gradients summed over dp (kn_pp_set_dp), with --dist zero1 the optimizer state of
 * each rank's stages sharded over dp (kn_pp_set_zero1); --mesh tp=T,pp=N (and dp=D,tp=T,pp=N)
 * under `mpiexec -n D*T*N`: every stage's blocks split T ways (kn_pp_config.tp);
 * train_impl.h): before
 * the run, kn_pp_check's refusals, made alike on every rank so a bad configuration ends the
 * job cleanly, and the device each rank takes (train_dist.c's); after the trainer is built
 * on one micro-batch, the communicator and the stages (kn_pp, core/dist/pp*.c); after the
 * run, the last step's timeline and its bubble beside the formula, and what each rank
 * holds: its stash's peak and its own slabs' bytes (parameters, gradients, optimizer state,
 * low copies: only its stages' parameters, kn_pp.held). --emit-ir FILE writes rank 0's
 * stage graphs, their send and recv ops included. KILN_PP_SLEEP_MS=F,B adds a sleep to every
 * forward and backward (kn_pp.test_sleep): a timeline of the schedule's shape on any machine. The entry point takes
 * (pp size, schedule, micro-batches, chunks), so a mesh's pp axis maps onto it. Ranks other
 * than 0 print nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_impl.h"

/* The mesh as written ("tp=2,pp=2"), into buf. */
static const char *mesh_text(const kn_mesh *m, char *buf, size_t size) {
    static const char *const names[KN_MESH_AXES] = {"dp", "tp", "pp"};
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->naxes && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s=%d", i ? "," : "", names[m->order[i]], m->size[m->order[i]]);
    return buf;
}

int kn_train_pp_begin(kn_train_opts *o, kn_train_dist *rd, int pp, int dp, const char *schedule, int micro,
                      int chunks) {
    kn_pp_config c = {.micro = micro > 0 ? micro : 4 * pp, .chunks = chunks};
    if (kn_pp_kind_parse(schedule, &c.schedule) != KN_OK) {
        fprintf(stderr, "kiln train: --schedule: %s\n", kn_last_error());
        return 2;
    }
    bool zero1 = !strcmp(o->dist, "zero1");
    if (o->dist[0] && !zero1) {
        if (dp == 1)
            fprintf(stderr, "kiln train: --pp with --dist %s: pipeline and data parallelism are not combined yet this "
                    "way; write the mesh: --mesh dp=2,pp=%d (DDP's all-reduce per stage; --dist zero1 on it for ZeRO-1)\n",
                    o->dist, pp);
        else
            fprintf(stderr, "kiln train: a mesh with pp and --dist %s: of the strategies only zero1 (the optimizer state "
                    "sharded over dp) is combined with pp yet; ZeRO-2/3 (gradients, parameters sharded) are not\n",
                    o->dist);
        return 2;
    }
    if (zero1 && dp == 1) {
        fprintf(stderr, "kiln train: --pp %d --dist zero1: ZeRO-1 shards the optimizer state over the mesh's dp axis, "
                "and there is none (write --mesh dp=2,pp=%d)\n", pp, pp);
        return 2;
    }
    c.accum = o->accum; /* --accum N: N rounds of the schedule per step, gradients summed */
    /* --remat: a stage's forward and backward are separate programs, so what the backward
     * recomputes is the cut's decision (kn_pp_config.remat_selective); every:K and full
     * would recompute matmuls from a stage's checkpoints, which the cut does not do */
    if (strcmp(o->remat, "none") != 0 && strcmp(o->remat, "selective") != 0) {
        fprintf(stderr, "kiln train: --pp with --remat %s: a pipeline stage's backward is its own program, which "
                "recomputes what the cut leaves out of the stash; only --remat selective (elementwise ops, views, "
                "layernorms) is built for it\n", o->remat);
        return 2;
    }
    c.remat_selective = !strcmp(o->remat, "selective");
    if (!strcmp(o->mode, "eager")) {
        fprintf(stderr, "kiln train: --pp runs each stage as compiled programs: use --mode interp or compiled, not "
                "eager\n");
        return 2;
    }
    char who[64];
    snprintf(who, sizeof who, "kiln train --pp %d", pp);
    if (kn_dist_init(who) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    rd->on = rd->pp_on = true;
    rd->rank = kn_dist_rank();
    rd->size = kn_dist_size();
    if (o->batch % (dp * c.accum) != 0) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --batch %d is not divisible by %s--accum %d (each %sround takes an equal "
                    "share)\n", o->batch, dp > 1 ? "dp x " : "", c.accum, dp > 1 ? "pipeline's " : "");
        return 2;
    }
    int tp = rd->mesh.size[KN_MESH_TP] > 1 ? rd->mesh.size[KN_MESH_TP] : 1;
    char text[64];
    if ((dp > 1 || tp > 1) && rd->size != dp * tp * pp) {
        if (rd->rank == 0) {
            if (tp > 1)
                fprintf(stderr, "kiln train: --mesh %s on %d ranks: the ranks must be dp x tp x pp = %d (run mpiexec "
                        "-n %d)\n", mesh_text(&rd->mesh, text, sizeof text), rd->size, dp * tp * pp, dp * tp * pp);
            else
                fprintf(stderr, "kiln train: --mesh dp=%d,pp=%d on %d ranks: the ranks must be dp x pp (run mpiexec "
                        "-n %d)\n", dp, pp, rd->size, dp * pp);
        }
        return 2;
    }
    kn_gpt_config g = {.vocab = 1, .context = o->context, .layers = o->layers, .width = o->width, .heads = o->heads};
    if (o->sp && tp == 1) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --sp is sequence parallelism within tensor parallelism: the mesh needs a tp "
                    "axis (--mesh tp=2,pp=%d)\n", pp);
        return 2;
    }
    if (tp > 1 && kn_mesh_check_gpt(&rd->mesh, &g) != KN_OK) { /* heads and width split over tp */
        if (rd->rank == 0) fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    if (kn_pp_check(&g, pp, rd->size / dp / tp, o->batch / dp / c.accum, &c) != KN_OK) {
        if (rd->rank == 0) fprintf(stderr, "kiln train: %s%s\n", kn_last_error(), dp > 1 ? " (per pipeline of dp)" : "");
        return 2;
    }
    rd->pp_cfg = c;
    rd->rows = o->batch / dp / c.accum / c.micro;
    return kn_train_dist_ranks(o, rd);
}

kn_status kn_train_pp_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr) {
    KN_TRY(kn_comm_world(&rd->comm, !strcmp(o->comm, "nccl") ? KN_COMM_NCCL : KN_COMM_MPI));
    kn_comm *ppc = rd->comm, *dpc = NULL;
    if (rd->mesh.size[KN_MESH_DP] > 1 || rd->mesh.size[KN_MESH_TP] > 1) {
        /* --mesh dp=D,tp=T,pp=N: the pipeline along pp, each stage split along tp, replicas along dp */
        int coords[KN_MESH_AXES];
        KN_TRY(kn_mesh_check_gpt(&rd->mesh, &tr->model->cfg));
        KN_TRY(kn_mesh_comms(&rd->mesh, rd->comm, rd->axes, coords));
        ppc = rd->axes[KN_MESH_PP];
        dpc = rd->axes[KN_MESH_DP];
        rd->pp_cfg.tp = rd->axes[KN_MESH_TP];
        rd->pp_cfg.tp_flags = o->sp ? KN_PLACE_SEQUENCE_PARALLEL : 0;
    }
    KN_TRY(kn_pp_new(&rd->pp, ppc, tr, &rd->pp_cfg));
    KN_TRY(kn_pp_set_dp(&rd->pp, dpc));
    kn_pp *p = &rd->pp;
    if (dpc)
        printf("  data parallel: dp=%d pipelines, %d rows each; every stage's gradients summed over dp (one "
               "all-reduce per step)\n", dpc->size, o->batch / dpc->size);
    if (!strcmp(o->dist, "zero1")) {
        int comps = tr->opt.n > 0 ? (int)(tr->opt.state_len / tr->opt.n) : 0;
        KN_TRY(kn_pp_set_zero1(p));
        printf("  ZeRO-1 on dp          optimizer state of %lld of the %lld parameters this rank's stages hold (%lld "
               "bytes; without ZeRO-1 %lld); the parameters all-gathered over dp after each update\n",
               (long long)(p->zhi - p->zlo), (long long)p->held, (long long)((p->zhi - p->zlo) * comps * 4),
               (long long)(p->held * comps * 4));
    }
    /* KILN_PP_SLEEP_MS=F,B: every forward sleeps F ms and backward B ms (kn_pp.test_sleep): a
     * timeline with the schedule's shape on any machine, for figures and the bubble formula */
    const char *sl = getenv("KILN_PP_SLEEP_MS");
    if (sl && *sl) {
        double f = 0, b = 0;
        if (sscanf(sl, "%lf,%lf", &f, &b) != 2 || f < 0 || b < 0 || f > 1e5 || b > 1e5)
            return kn_error(KN_ERR_ARG, "KILN_PP_SLEEP_MS='%s': expected FORWARD_MS,BACKWARD_MS (e.g. 20,40)", sl);
        p->test_sleep[0] = f / 1e3;
        p->test_sleep[1] = b / 1e3;
        printf("  test sleeps           every forward %g ms, every backward %g ms (KILN_PP_SLEEP_MS)\n", f, b);
    }
    printf("  pipeline parallel: %d stages of %d blocks on %d ranks (%s, %d chunk%s per rank), schedule %s, %d "
           "micro-batches of %d rows\n", p->stages, tr->model->cfg.layers / p->stages, p->p, o->comm, p->v,
           p->v == 1 ? "" : "s", kn_pp_kind_name(p->cfg.schedule), p->cfg.micro, rd->rows);
    if (p->cfg.accum > 1)
        printf("  accumulation          %d rounds of the schedule per step (--accum), gradients summed\n", p->cfg.accum);
    if (p->scaled)
        printf("  loss scale            the last stage differentiates loss x scale; an overflow on any rank skips the "
               "step on all\n");
    printf("  send / recv           ops of each stage's forward and backward programs (mesh axis 2, pp)\n");
    if (p->tp) {
        printf("  tensor parallel: tp=%d ranks per stage (%s), Megatron's split placed on each stage's graph: the "
               "placement pass put %d all_reduce, %d all_gather, %d reduce_scatter in rank 0's stages%s; it holds "
               "%lld of the %lld parameters of the local layout\n", p->tp_parts, o->comm, p->tp_all_reduce,
               p->tp_all_gather, p->tp_reduce_scatter, o->sp ? " (sequence parallel)" : "", (long long)p->held,
               (long long)p->ln);
        if (!kn_mesh_vocab_split(&rd->mesh, &tr->model->cfg))
            printf("  vocabulary            %d is not a multiple of tp=%d: the token embedding and the logits stay "
                   "replicated\n", tr->model->cfg.vocab, p->tp_parts);
    }
    if (o->emit_ir[0] && rd->rank == 0) {
        FILE *f = fopen(o->emit_ir, "w");
        if (!f) return kn_error(KN_ERR_IO, "--emit-ir %s: cannot open: %s", o->emit_ir, strerror(errno));
        kn_status st = kn_pp_print(f, p);
        if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "--emit-ir %s: write failed", o->emit_ir);
        KN_TRY(st);
        printf("  stages                %s (rank 0's forward and backward graphs)\n", o->emit_ir);
    }
    return KN_OK;
}

void kn_train_pp_report(const kn_train_opts *o, kn_train_dist *rd) {
    kn_pp *p = &rd->pp;
    double bubble = 0;
    if (kn_pp_timeline(p, o->timeline[0] ? o->timeline : NULL, &bubble) != KN_OK) {
        fprintf(stderr, "kiln train: rank %d: %s\n", rd->rank, kn_last_error());
        return;
    }
    int pp = p->p, m = p->cfg.micro, v = p->v;
    printf("  pipeline bubble       %.1f%% measured in the last step (1 - busy / (p x makespan)); (p-1)/(m+p-1) = "
           "%.1f%%", 100 * bubble, 100.0 * (pp - 1) / (m + pp - 1));
    if (v > 1) printf(", interleaved (p-1)/(v m+p-1) = %.1f%%", 100.0 * (pp - 1) / (v * m + pp - 1));
    printf("\n");
    static double st[KN_PP_STATS * 1024]; /* the pp ranks of this rank's tp coordinate (rank 0's: tp rank 0) */
    double P = (double)p->tr->model->p.n;
    if (pp <= 1024 && kn_pp_rank_stats(p, st) == KN_OK)
        for (int r = 0; r < pp; r++) {
            const double *q = st + KN_PP_STATS * r;
            printf("  rank %-16d stash: %.0f micro-batch chunks' activations alive at the peak, %.2f MB\n", r, q[0],
                   q[1] / 1e6);
            printf("  rank %-16d holds %.0f of P = %.0f parameters (%.1f%%, P/%s %.1f%%): parameter bytes %.0f, "
                   "gradient bytes %.0f, optimizer-state bytes %.0f, low-copy bytes %.0f\n", r, q[2], P,
                   100 * q[2] / P, p->tp ? "(p tp)" : "p", 100.0 / (pp * p->tp_parts), q[3], q[4], q[5], q[6]);
        }
    if (o->timeline[0]) printf("  timeline              %s (draw: bash plots/pp_timeline.sh %s OUT.png)\n", o->timeline,
                               o->timeline);
}
