/* train_tp.c — tensor parallelism for `kiln train` (--mesh tp=N under `mpiexec -n N`;
 * train_impl.h): before the run, the mesh's checks every rank makes alike (so a bad mesh
 * ends the job with one clear message, not in MPI_Abort) and the device each rank takes;
 * after the trainer is built, the split of the model (kn_mesh_check_gpt), the communicator
 * and the tensor-parallel state (kn_tp, core/dist/tp_train.c). Ranks other than 0 print
 * nothing. A dp axis beside tp averages the local gradients over the data-parallel groups
 * (kn_tp_set_dp); --accum N runs N micro-batches per step (kn_tp_set_accum); fp16's loss
 * scale and --resume are the trainer's (the step runner's overflow decision, the shards cut
 * from a loaded model and optimizer state). A pp axis is train_pp.c's (tensor-parallel
 * stages). What is not combined yet says so: --dist other than zero1 (ZeRO-1 on the mesh's dp axis: kn_tp_set_zero1). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/train_impl.h"
#include "kiln/device.h"
#include "kiln/passes.h"

int kn_train_tp_begin(kn_train_opts *o, kn_train_dist *rd) {
    /* the mesh's size is the job's: decided before MPI starts when possible (the launcher's
     * environment), so every rank prints the same message and exits 2 */
    if (o->sp && !o->mesh[0]) {
        fprintf(stderr, "kiln train: --sp is sequence parallelism within tensor parallelism: give --mesh tp=N\n");
        return 2;
    }
    bool zero1 = !strcmp(o->dist, "zero1");
    if (o->dist[0] && !zero1) {
        fprintf(stderr, "kiln train: --mesh with --dist %s: write the data-parallel axis in the mesh (dp=2,tp=2); "
                "of the strategies only --dist zero1 (the optimizer state sharded over dp) is combined with it yet\n",
                o->dist);
        return 2;
    }
    char who[96];
    snprintf(who, sizeof who, "kiln train --mesh %s", o->mesh);
    if (kn_dist_init(who) != KN_OK) {
        fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    rd->tp_on = true;
    rd->rank = kn_dist_rank();
    rd->size = kn_dist_size();
    if (kn_mesh_parse(o->mesh, rd->size, &rd->mesh) != KN_OK) {
        if (rd->rank == 0) fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    if (rd->mesh.size[KN_MESH_PP] > 1) { /* a pp axis is train_pp.c's unless --pp says otherwise */
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --mesh %s with --pp %d: the mesh's pp axis and --pp disagree (give one)\n",
                    o->mesh, o->pp);
        return 2;
    }
    int dp = rd->mesh.size[KN_MESH_DP];
    if (rd->mesh.size[KN_MESH_TP] == 1 && dp > 1) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --mesh %s: no tensor parallelism (tp=1): data parallelism alone is --dist "
                    "ddp\n", o->mesh);
        return 2;
    }
    int accum = o->accum > 1 ? o->accum : 1;
    if (o->batch % (dp * accum) != 0) {
        if (rd->rank == 0) {
            char acc[32] = "";
            if (accum > 1) snprintf(acc, sizeof acc, " x --accum %d", accum);
            fprintf(stderr, "kiln train: --mesh %s: --batch %d is not divisible by dp=%d%s (each data-parallel group "
                    "and micro-batch takes an equal share)\n", o->mesh, o->batch, dp, acc);
        }
        return 2;
    }
    rd->rows = o->batch / dp / accum;
    if (zero1 && dp == 1) {
        if (rd->rank == 0)
            fprintf(stderr, "kiln train: --mesh %s --dist zero1: ZeRO-1 shards the optimizer state over the mesh's dp "
                    "axis, and it has none (write --mesh dp=2,tp=...)\n", o->mesh);
        return 2;
    }
    kn_gpt_config shape = {.vocab = 1, .context = o->context, .layers = o->layers, .width = o->width, .heads = o->heads};
    if (kn_mesh_check_gpt(&rd->mesh, &shape) != KN_OK) { /* the vocabulary is the data's: attach */
        if (rd->rank == 0) fprintf(stderr, "kiln train: %s\n", kn_last_error());
        return 2;
    }
    return kn_train_dist_ranks(o, rd); /* the device each rank takes, ranks > 0 silenced: as --dist */
}

kn_status kn_train_tp_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr) {
    if (!rd->tp_on) return KN_OK;
    KN_TRY(kn_mesh_check_gpt(&rd->mesh, &tr->model->cfg));
    KN_TRY(kn_comm_world(&rd->comm, !strcmp(o->comm, "nccl") ? KN_COMM_NCCL : KN_COMM_MPI));
    int coords[KN_MESH_AXES];
    KN_TRY(kn_mesh_comms(&rd->mesh, rd->comm, rd->axes, coords));
    kn_comm *tp = rd->axes[KN_MESH_TP] ? rd->axes[KN_MESH_TP] : rd->comm; /* tp absent: one rank (begin) */
    KN_TRY(kn_tp_new(&rd->tp, tp, tr, o->sp ? KN_PLACE_SEQUENCE_PARALLEL : 0));
    KN_TRY(kn_tp_set_dp(&rd->tp, rd->axes[KN_MESH_DP]));
    KN_TRY(kn_tp_set_accum(&rd->tp, o->accum > 1 ? o->accum : 1));
    if (!strcmp(o->dist, "zero1")) {
        KN_TRY(kn_tp_set_zero1(&rd->tp));
        printf("  ZeRO-1 on dp          optimizer state of %lld of the %lld local parameters on this rank (%lld bytes; "
               "without ZeRO-1 %lld)\n", (long long)(rd->tp.zhi - rd->tp.zlo), (long long)rd->tp.n,
               (long long)(rd->tp.opt.state_len * (int64_t)sizeof(float)),
               (long long)(rd->tp.zhi > rd->tp.zlo ? rd->tp.opt.state_len / (rd->tp.zhi - rd->tp.zlo) * rd->tp.n *
                                                         (int64_t)sizeof(float) : 0));
    }
    if (o->accum > 1)
        printf("  accumulation          %d micro-batches of %d rows per step (--accum), gradients summed in a local "
               "slab\n", o->accum, rd->rows);
    if (rd->tp.scaled)
        printf("  loss scale            the local graphs differentiate loss x scale; an overflow on any rank skips the "
               "step on all\n");
    if (tr->opt.step > 0)
        printf("  resumed               the shards and their optimizer state cut from the checkpoint's (optimizer "
               "step %lld)\n", (long long)tr->opt.step);
    printf("  tensor parallel: tp=%d ranks (%s), Megatron's split; the step's local graph has %d all_reduce, %d "
           "all_gather (the placement pass); %lld of %lld parameters per rank\n", tp->size, o->comm,
           rd->tp.placed.all_reduce, rd->tp.placed.all_gather, (long long)rd->tp.n, (long long)tr->model->p.n);
    double live_one = 0, live_rank = 0; /* activations: the largest live set in node order */
    KN_TRY(kn_graph_live_bytes(tr->joint, &live_one, NULL));
    KN_TRY(kn_graph_live_bytes(rd->tp.placed.local, &live_rank, NULL));
    printf("  activation memory     %.2f MB per rank at the largest live set of the step (one process: %.2f MB)%s; "
           "%d reduce_scatter\n", live_rank / 1e6, live_one / 1e6, o->sp ? ", sequence parallel" : "",
           rd->tp.placed.reduce_scatter);
    if (strcmp(o->remat, "none") != 0 && tr->passes) { /* the local program was compiled with the trainer's passes */
        double live0 = 0, live1 = 0;
        KN_TRY(kn_passes_live_bytes_on(rd->tp.placed.local, NULL, kn_program_target_default(), &live0));
        KN_TRY(kn_passes_live_bytes_on(rd->tp.placed.local, tr->passes, kn_program_target_default(), &live1));
        printf("  remat %-15s the local step's largest live set %.2f MB (%.2f MB without its passes)\n", o->remat,
               live1 / 1e6, live0 / 1e6);
    }
    if (rd->axes[KN_MESH_DP])
        printf("  data parallel: dp=%d groups, %d rows each; the local gradients averaged over dp (one all-reduce "
               "per step)\n", rd->axes[KN_MESH_DP]->size, rd->rows);
    if (!kn_mesh_vocab_split(&rd->mesh, &tr->model->cfg))
        printf("  vocabulary            %d is not a multiple of tp=%d: the token embedding and the logits stay "
               "replicated\n", tr->model->cfg.vocab, rd->size);
    if (o->emit_ir[0] && rd->rank == 0) {
        FILE *f = fopen(o->emit_ir, "w");
        if (!f) return kn_error(KN_ERR_IO, "--emit-ir %s: cannot open: %s", o->emit_ir, strerror(errno));
        kn_status st = kn_place_print(f, &rd->tp.placed);
        if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "--emit-ir %s: write failed", o->emit_ir);
        KN_TRY(st);
        printf("  local graph           %s (rank 0's, with placements and collectives)\n", o->emit_ir);
    }
    return KN_OK;
}
