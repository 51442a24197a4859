/* train_dist.c — data parallelism for `kiln train` (--dist ddp|zero1|zero2|zero3 under
 * `mpiexec -n N`; train_impl.h): before the run, the checks every rank makes alike (so a
 * bad combination ends the job cleanly, not in MPI_Abort) and the device each rank takes
 * (CPU ranks over MPI, one GPU per rank over NCCL); after the trainer is built, the
 * communicator and the strategy (kn_dp, core/dist/dp.c); after the run, rank 0's report of
 * the memory per rank against distributed.md's table and of how much communication the
 * backward hid. Ranks other than 0 print nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_impl.h"
#include "kiln/device.h"
#include "kiln/passes.h"
#include "kiln/program.h"

int kn_train_dist_begin(kn_train_opts *o, kn_train_dist *rd) {
    memset(rd, 0, sizeof *rd);
    rd->size = 1;
    int pp_dp = 1;
    if (o->mesh[0]) { /* --mesh pp=N [with dp=D, tp=T] is --pp N on D pipelines of T-way
                       * tensor-parallel stages (train_pp.c) */
        kn_mesh m;
        if (kn_mesh_parse(o->mesh, 0, &m) == KN_OK && m.size[KN_MESH_PP] > 1 &&
            (o->pp == 0 || o->pp == m.size[KN_MESH_PP])) {
            o->pp = m.size[KN_MESH_PP];
            pp_dp = m.size[KN_MESH_DP];
            rd->mesh = m;
            o->mesh[0] = '\0';
        }
    }
    if (o->pp > 0 && !o->mesh[0])
        return kn_train_pp_begin(o, rd, o->pp, pp_dp, o->schedule, o->microbatches, o->chunks);
    if (o->mesh[0] || o->sp) return kn_train_tp_begin(o, rd);
    if (!o->dist[0]) return -1;
    kn_dp_strategy s;
    if (kn_dp_strategy_parse(o->dist, &s) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    if (strcmp(o->comm, "mpi") != 0 && strcmp(o->comm, "nccl") != 0) {
        fprintf(stderr, "kiln train: --comm '%s': expected mpi or nccl\n", o->comm);
        return 2;
    }
    if (strcmp(o->compress, "none") != 0 && strcmp(o->compress, "int8") != 0) {
        fprintf(stderr, "kiln train: --compress '%s': expected none or int8\n", o->compress);
        return 2;
    }
    if (!strcmp(o->compress, "int8") && (s != KN_DP_DDP || strcmp(o->comm, "mpi") != 0 || !strcmp(o->allreduce, "ring"))) {
        /* decided here, the same on every rank, so the job ends cleanly (not by MPI_Abort) */
        fprintf(stderr, "kiln train: --compress int8 compresses DDP's buckets on CPU ranks with the library's "
                "all-gather (asked: --dist %s, --comm %s, --allreduce %s)\n", o->dist, o->comm, o->allreduce);
        return 2;
    }
    kn_loss_scaler ls;
    if (!strcmp(o->compress, "int8") && kn_loss_scaler_parse(o->loss_scale, !strcmp(o->precision, "fp16"), &ls) == KN_OK &&
        ls.mode != KN_LOSS_SCALE_NONE) {
        fprintf(stderr, "kiln train: --compress int8 with a loss scale (--precision %s, --loss-scale %s): an overflow's "
                "inf would enter the error feedback, which a skipped step cannot take back (use --loss-scale none, "
                "or bf16, which needs no loss scale)\n", o->precision, o->loss_scale);
        return 2;
    }
    if (strcmp(o->allreduce, "library") != 0 && strcmp(o->allreduce, "ring") != 0) {
        fprintf(stderr, "kiln train: --allreduce '%s': expected library or ring\n", o->allreduce);
        return 2;
    }
    if (s != KN_DP_DDP && !strcmp(o->allreduce, "ring")) {
        fprintf(stderr, "kiln train: --allreduce ring is DDP's all-reduce; --dist %s reduce-scatters the gradients "
                "(use --dist ddp, or drop --allreduce)\n", o->dist);
        return 2;
    }
    char who[64];
    snprintf(who, sizeof who, "kiln train --dist %s", o->dist);
    if (kn_dist_init(who) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    rd->on = true;
    rd->rank = kn_dist_rank();
    rd->size = kn_dist_size();
    if (o->batch % (rd->size * o->accum) != 0) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --batch %d is not divisible by %d ranks x --accum %d: each rank takes an "
                    "equal share of the global batch (try --batch %d)\n", o->batch, rd->size, o->accum,
                    rd->size * o->accum * (o->batch / (rd->size * o->accum) + 1));
        return 2;
    }
    rd->rows = o->batch / (rd->size * o->accum);
    return kn_train_dist_ranks(o, rd);
}

int kn_train_dist_ranks(kn_train_opts *o, kn_train_dist *rd) {
    if (!strcmp(o->comm, "nccl")) {
        /* GPU ranks: one GPU per rank, the rank's index on its host (as kn_comm_world(nccl)) */
        int local = kn_dist_local_rank();
        if (kn_device_count(KN_DEVICE_CUDA) == 0) {
            if (rd->rank == 0)
                fprintf(stderr, "kiln train: --comm nccl: NCCL was asked for, but this machine has no usable GPU (CPU "
                        "ranks use --comm mpi)\n");
            return 2;
        }
        char want[16];
        snprintf(want, sizeof want, "cuda:%d", local & 0xffff);
        if (!strcmp(o->device, "auto") || !strcmp(o->device, "cuda")) snprintf(o->device, sizeof o->device, "%s", want);
        if (strcmp(o->device, want) != 0) {
            fprintf(stderr, "kiln train: rank %d: --comm nccl runs one rank per GPU, and this rank (local index %d) "
                    "takes %s, not --device %s\n", rd->rank, local, want, o->device);
            return 2;
        }
    } else if (!strcmp(o->device, "auto")) {
        snprintf(o->device, sizeof o->device, "cpu"); /* CPU ranks (MPI) */
    } else if (strcmp(o->device, "cpu") != 0) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --device %s with --comm mpi: GPU ranks talk over NCCL (add --comm nccl)\n",
                    o->device);
        return 2;
    }
    if (rd->rank > 0) {
        /* one voice: rank 0 prints (errors still reach stderr with the rank's name) */
        if (!freopen("/dev/null", "w", stdout)) return 1;
        o->log[0] = '\0';
    }
    return -1;
}

kn_status kn_train_dist_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr) {
    if (!rd->on) return KN_OK;
    if (rd->pp_on) return kn_train_pp_attach(o, rd, tr);
    KN_TRY(kn_comm_world(&rd->comm, !strcmp(o->comm, "nccl") ? KN_COMM_NCCL : KN_COMM_MPI));
    kn_dp_config c = {.bucket_mb = o->bucket_mb, .accum = o->accum, .ring = !strcmp(o->allreduce, "ring"),
                      .compress = !strcmp(o->compress, "int8")};
    KN_TRY(kn_dp_strategy_parse(o->dist, &c.strategy));
    KN_TRY(kn_dp_new(&rd->dp, rd->comm, tr, &c));
    printf("  data parallel: %s on %d ranks (%s, %s all-reduce%s), %d rows x %d micro-batches per rank, %d "
           "bucket%s of <= %g MiB\n", o->dist, rd->size, o->comm, o->allreduce,
           c.compress ? ", int8 gradients with error feedback" : "", rd->rows, o->accum, rd->dp.nbuckets,
           rd->dp.nbuckets == 1 ? "" : "s", o->bucket_mb);
    printf("  collectives           ops of the step's graph, placed by the pass below (--emit-ir shows where)\n");
    printf("  pass                  %s\n", rd->dp.pass);
    if (o->emit_ir[0] && rd->rank == 0) {
        FILE *f = fopen(o->emit_ir, "w");
        if (!f) return kn_error(KN_ERR_IO, "--emit-ir %s: cannot open: %s", o->emit_ir, strerror(errno));
        kn_status st = kn_dp_schedule_print(f, &rd->dp);
        if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "--emit-ir %s: write failed", o->emit_ir);
        KN_TRY(st);
        printf("  schedule              %s (the joint graph with its collectives)\n", o->emit_ir);
    }
    return KN_OK;
}

void kn_train_dist_report(const kn_train_dist *rd, int64_t P) {
    if (!rd->on || rd->pp_on) return;
    kn_dp_memory m = kn_dp_memory_of(&rd->dp), e = kn_dp_memory_expected(rd->dp.cfg.strategy, P, rd->size);
    printf("  memory per rank (bytes)   held        table (fp32 Adam, P=%lld, N=%d)\n", (long long)P, rd->size);
    printf("    parameters              %-11lld %lld\n", (long long)m.params, (long long)e.params);
    printf("    gradients               %-11lld %lld\n", (long long)m.grads, (long long)e.grads);
    printf("    optimizer state         %-11lld %lld\n", (long long)m.optim, (long long)e.optim);
    printf("    total                   %-11lld %lld%s\n", (long long)(m.params + m.grads + m.optim),
           (long long)(e.params + e.grads + e.optim), "");
    if (m.staging_peak) printf("    + buckets in flight     %lld at the peak\n", (long long)m.staging_peak);
    if (m.gathered_peak)
        printf("    + parameters gathered   %lld at the peak (the table's \"one layer gathered\": here buckets)\n",
               (long long)m.gathered_peak);
    /* each rank's own bytes (ZeRO-3: its parameter shard, about 4P/N), and on GPU ranks what
     * the device held after the last step, measured */
    static kn_dp_memory per[1024];
    if (rd->size <= 1024 && kn_dp_memory_ranks(&rd->dp, per) == KN_OK)
        for (int r = 0; r < rd->size; r++) {
            printf("  rank %-16d holds %.1f%% of the parameters (1/N %.1f%%): parameter bytes %lld, gradient bytes "
                   "%lld, optimizer-state bytes %lld", r, P > 0 ? 100.0 * (double)per[r].params / (4.0 * (double)P) : 0,
                   100.0 / rd->size, (long long)per[r].params, (long long)per[r].grads, (long long)per[r].optim);
            if (per[r].device) printf("; device bytes after the last step %lld", (long long)per[r].device);
            printf("\n");
        }
    printf("  gradients sent        %lld bytes per step by this rank (%s)\n", (long long)rd->dp.bytes_sent,
           rd->dp.cfg.compress ? "int8 codes and a scale per 256" : "f32");
    const kn_dp_stats *s = &rd->dp.stats;
    if (rd->dp.z3) {
        double hid = s->gather_s > 0 ? 1.0 - s->gather_wait_s / s->gather_s : 0;
        printf("  parameters gathered   %lld bytes per step (%d all_gathers: forward and backward of every "
               "micro-batch); %.2f ms in flight, %.2f ms of it waited for: %.0f%% hidden by the prefetch\n",
               (long long)rd->dp.gathered_bytes, s->gathers, 1e3 * s->gather_s, 1e3 * s->gather_wait_s,
               100 * (hid < 0 ? 0 : hid));
    }
    if (rd->dp.tr && rd->dp.tr->cuda_graph) {
        printf("  overlap               the collectives run inside the step's CUDA graph (%lld launches), queued in "
               "stream order among the backward's kernels: the host sees only the step's end (profile with nsys)\n",
               (long long)kn_program_get_stats(rd->dp.tr->prog).graph_launches);
        return;
    }
    if (rd->dp.tr && rd->dp.tr->dev.type != KN_DEVICE_CPU) {
        /* the host runs ahead of a GPU: its clock knows when the backward ended (the loss was
         * read) and when the last bucket was done, not when each collective really ran */
        printf("  overlap (last step)   %.2f ms of communication after the backward (%.2f ms); the collectives' "
               "own time: kiln bench-comm --comm nccl\n", 1e3 * s->exposed_s, 1e3 * s->backward_s);
        return;
    }
    double hidden = s->comm_s > 0 ? 1.0 - s->exposed_s / s->comm_s : 0;
    if (hidden < 0) hidden = 0;
    printf("  overlap (last step)   communication %.2f ms, %.2f ms of it after the backward: %.0f%% hidden behind "
           "the backward (%.2f ms)\n", 1e3 * s->comm_s, 1e3 * s->exposed_s, 100 * hidden, 1e3 * s->backward_s);
    kn_overlap_room room; /* the IR's placement: where the backward ends (the first comm_wait) and the starts */
    if (kn_dp_overlap_room(kn_program_graph(rd->dp.tr->prog), &room) == KN_OK)
        printf("  overlap (placement)   the backward ends at the step's first comm_wait; %d bucket starts, each with "
               "%.0f%% of the backward's FLOPs still to run on average (%.0f%% .. %.0f%%)\n", room.starts,
               100 * room.mean, 100 * room.least, 100 * room.most);
}

void kn_train_dist_end(kn_train_dist *rd) {
    if (rd->tp_on) {
        kn_tp_free(&rd->tp);
        for (int a = 0; a < KN_MESH_AXES; a++) kn_comm_free(rd->axes[a]);
        kn_comm_free(rd->comm);
        kn_dist_finalize();
        return;
    }
    if (!rd->on) return;
    if (rd->pp_on) kn_pp_free(&rd->pp);
    else kn_dp_free(&rd->dp);
    for (int a = 0; a < KN_MESH_AXES; a++) kn_comm_free(rd->axes[a]); /* --mesh dp=D,pp=N's */
    kn_comm_free(rd->comm);
    kn_dist_finalize();
}


/* ---------------------------------------------------------------- --offload optimizer */

kn_status kn_train_offload_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr, kn_offload **out) {
    bool on = false;
    *out = NULL;
    KN_TRY(kn_offload_parse(o->offload, &on));
    if (!on) return KN_OK;
    if (rd->pp_on || rd->tp_on)
        return kn_error(KN_ERR_UNSUPPORTED, "--offload optimizer with %s: the offload runs the update of one process "
                        "or of --dist ddp, zero1, zero2; pipeline and tensor parallel meshes step their own parts "
                        "(drop --offload, or the mesh)", rd->pp_on ? "--pp" : "--mesh");
    return rd->on ? kn_offload_dp(out, &rd->dp, 0) : kn_offload_trainer(out, tr, 0);
}

void kn_train_offload_report(const kn_offload *f) {
    if (!f) return;
    kn_offload_stats s = kn_offload_stats_of(f);
    printf("  offload optimizer     %lld bytes of pinned host memory held (master copy, gradients, optimizer state "
           "of %lld parameters); %lld bytes of optimizer state given back by the GPU\n", (long long)s.host_bytes,
           (long long)s.n, (long long)s.device_freed);
    printf("  offload (last step)   %lld bytes down + %lld up in %lld chunk%s: %.2f ms, of which %.2f ms waiting for "
           "gradients, %.2f ms the host's update, %.2f ms the last parameters going up\n", (long long)s.bytes_down,
           (long long)s.bytes_up, (long long)s.chunks, s.chunks == 1 ? "" : "s", 1e3 * s.step_s, 1e3 * s.wait_down_s,
           1e3 * s.host_s, 1e3 * s.wait_up_s);
}
