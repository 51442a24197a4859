/* zero3.c — ZeRO-3 / FSDP: the parameters sharded like the optimizer state, and gathered a
 * bucket at a time for the steps that read them (kiln/dist.h; dp.c runs the rest of the
 * step as for ZeRO-2: gradients reduce-scattered into the shard, the optimizer on the shard).
 *
 * Each rank keeps 1/N of the parameter slab (param_shard), and the optimizer updates only
 * that. No rank holds the whole model between steps: the model's slab is freed, and the
 * trainer's step program reads its parameters as deferred params (kiln/program.h), which
 * a hook supplies before each step and takes away after their last reader.
 *
 * The plan is made once from the compiled step program: which parameters each step reads
 * (kn_program_step_reads), hence which buckets. A bucket's reads before the loss (the
 * forward) form one window of steps, its reads after the loss (the backward) another; so
 * each bucket is gathered twice per micro-batch and freed in between, as FSDP frees
 * ("reshards") after the forward. The windows, in the order of their first steps, are the
 * order of the all_gathers. Every rank runs the same program and so starts them in the same
 * order, which MPI's nonblocking collectives require.
 *
 * Before step s, the hook
 *   1. drops the windows whose last step is over: the program's aliases go
 *      (kn_program_supply with NULL), then the buffer, and its memory is back;
 *   2. for each window that starts at s, waits for its all_gather (started earlier) and
 *      supplies each parameter of the bucket as a view into the gathered buffer;
 *   3. starts the all_gather of the next window (the prefetch, one ahead), which then runs
 *      while the steps before its first use compute (the node hook polls it: MPI moves
 *      data inside MPI_Test).
 * At a time, the buckets of the windows in use and one in flight are gathered: the
 * table's "+ one layer gathered", with buckets for layers. Traffic per micro-batch: P
 * gathered for the forward, P for the backward, P of gradients reduce-scattered: 3P
 * against DDP's 2P, the price of holding 16P/N bytes.
 *
 * Between steps, kn_dp_gather_state can bring the whole slab back (evaluation, sampling,
 * a checkpoint); the next step frees it again. The shard is what trains. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_impl.h"

typedef enum z3_state { Z3_IDLE = 0, Z3_FLIGHT, Z3_GATHERED, Z3_LIVE } z3_state;

/* A window: the steps [first, last] that read bucket `bucket` in one phase. */
typedef struct z3_window {
    int bucket;
    int first, last;
    bool backward;
    z3_state state;
    kn_tensor *buf;        /* the gathered bucket, f32[hi - lo], from the start of its gather to the drop */
    kn_comm_req req;
    double t_start;
} z3_window;

struct kn_dp_z3 {
    int nwin;
    z3_window *win;        /* sorted by first step */
    int32_t *param_node;   /* per parameter: its param node in the step program (-1: no step reads it) */
    int *param_win;        /* per parameter: the window whose view the program holds now (-1: none) */
    int *node_step;        /* per node of the step program: the step it ends (-1: none), for --emit-ir */
    int next_use;          /* the windows before it have been supplied in this run */
    int64_t retained;      /* dropped buckets the program still holds a view of, until the run ends */
};

static int cmp_window(const void *a, const void *b) {
    const z3_window *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->bucket != y->bucket ? (x->bucket < y->bucket ? -1 : 1) : (int)x->backward - (int)y->backward;
}

/* The windows: per bucket, the first and last step reading it before and after the loss. */
static kn_status plan(kn_dp *d) {
    kn_dp_z3 *z = d->z3;
    const kn_program *prog = d->tr->prog;
    const kn_graph *g = kn_program_graph(prog);
    const kn_params *p = &d->tr->model->p;
    int nsteps = kn_program_nsteps(prog), nb = d->nbuckets, cap = 64;
    int *node_param = kn_malloc((size_t)g->nnodes * sizeof *node_param);
    int *span = kn_malloc((size_t)nb * 4 * sizeof *span); /* per bucket: first, last (forward), first, last */
    int32_t *reads = kn_malloc((size_t)cap * sizeof *reads);
    z->win = kn_calloc((size_t)nb * 2, sizeof *z->win);
    z->node_step = kn_malloc((size_t)g->nnodes * sizeof *z->node_step);
    kn_status st = node_param && span && reads && z->win && z->node_step ? KN_OK
                                                                          : kn_error(KN_ERR_OOM, "kn_dp_new: out of memory");
    for (int i = 0; st == KN_OK && i < g->nnodes; i++) node_param[i] = z->node_step[i] = -1;
    for (int s = 0; st == KN_OK && s < nsteps; s++) z->node_step[kn_program_step_node(prog, s)] = s;
    for (int i = 0; st == KN_OK && i < nb * 4; i++) span[i] = -1;
    for (int i = 0; st == KN_OK && i < p->count; i++) {
        z->param_node[i] = -1;
        for (int32_t v = 0; v < g->nnodes && z->param_node[i] < 0; v++)
            if (g->nodes[v].op == KN_OP_PARAM && !strcmp(g->nodes[v].attrs.name, p->info[i].name)) {
                z->param_node[i] = v;
                node_param[v] = i;
            }
    }
    int32_t loss = g->outputs[0];
    for (int s = 0; st == KN_OK && s < nsteps; s++) {
        int n = kn_program_step_reads(prog, s, NULL, 0);
        if (n > cap) {
            kn_free(reads);
            cap = n;
            if (!(reads = kn_malloc((size_t)cap * sizeof *reads))) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory");
        }
        if (st != KN_OK) break;
        kn_program_step_reads(prog, s, reads, cap);
        int phase = kn_program_step_node(prog, s) > loss; /* the backward's nodes come after the loss */
        for (int k = 0; k < n; k++) {
            if (node_param[reads[k]] < 0) continue;
            int *sp = span + 4 * d->param_bucket[node_param[reads[k]]] + 2 * phase;
            if (sp[0] < 0) sp[0] = s;
            sp[1] = s;
        }
    }
    for (int b = 0; st == KN_OK && b < nb; b++)
        for (int ph = 0; ph < 2; ph++)
            if (span[4 * b + 2 * ph] >= 0)
                z->win[z->nwin++] = (z3_window){b, span[4 * b + 2 * ph], span[4 * b + 2 * ph + 1], ph == 1, Z3_IDLE,
                                                NULL, {0}, 0};
    if (st == KN_OK) qsort(z->win, (size_t)z->nwin, sizeof *z->win, cmp_window);
    kn_free(node_param);
    kn_free(span);
    kn_free(reads);
    return st;
}

/* Start window w's all_gather: every rank sends its part of the bucket, all receive it whole. */
static kn_status start(kn_dp *d, int w) {
    z3_window *x = &d->z3->win[w];
    const kn_dp_bucket *k = &d->buckets[x->bucket];
    int64_t n = k->hi - k->lo, counts[1024], a = k->lo > kn_dp_my_lo(d) ? k->lo : kn_dp_my_lo(d);
    if (d->comm->size > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    kn_dp_shard_counts(d, k->lo, k->hi, counts);
    KN_TRY(kn_tensor_empty_on(&x->buf, d->tr->dev, KN_DT_F32, 1, &n));
    char what[48];
    snprintf(what, sizeof what, "parameters of bucket %d (%s)", x->bucket, x->backward ? "backward" : "forward");
    const float *mine = d->param_shard + (counts[d->comm->rank] > 0 ? a - kn_dp_my_lo(d) : 0);
    x->t_start = kn_time_now();
    kn_status st = kn_comm_iall_gather(d->comm, mine, kn_tensor_data(x->buf), counts, KN_DT_F32, what, &x->req);
    if (st != KN_OK) {
        kn_tensor_free(x->buf);
        x->buf = NULL;
        return st;
    }
    x->state = Z3_FLIGHT;
    d->gathered_bytes += n * (int64_t)sizeof(float);
    d->gathered_live += n * (int64_t)sizeof(float);
    if (d->gathered_live > d->gathered_peak) d->gathered_peak = d->gathered_live;
    d->stats.gathers++;
    return KN_OK;
}

static void gathered(kn_dp *d, z3_window *x) {
    x->state = Z3_GATHERED;
    d->stats.gather_s += kn_time_now() - x->t_start;
}

/* Window w's buffer to the program: each parameter of its bucket a view into it. */
static kn_status use(kn_dp *d, int w) {
    z3_window *x = &d->z3->win[w];
    if (x->state == Z3_IDLE) KN_TRY(start(d, w));
    if (x->state == Z3_FLIGHT) {
        double t0 = kn_time_now();
        KN_TRY(kn_comm_wait(&x->req));
        d->stats.gather_wait_s += kn_time_now() - t0;
        gathered(d, x);
    }
    const kn_dp_bucket *k = &d->buckets[x->bucket];
    const kn_params *p = &d->tr->model->p;
    for (int i = k->first_param; i <= k->last_param; i++) {
        if (d->z3->param_node[i] < 0) continue;
        const kn_param_info *pi = &p->info[i];
        kn_tensor *flat = NULL, *view = NULL;
        kn_status st = kn_tensor_slice(&flat, x->buf, 0, pi->offset - k->lo, pi->offset - k->lo + pi->numel, 1);
        if (st == KN_OK) st = kn_tensor_view(&view, flat, pi->ndim, pi->shape);
        if (st == KN_OK) st = kn_program_supply(d->tr->prog, d->z3->param_node[i], view);
        kn_tensor_free(view);
        kn_tensor_free(flat);
        KN_TRY(st);
        d->z3->param_win[i] = w;
    }
    x->state = Z3_LIVE;
    return KN_OK;
}

/* Window w's parameters leave the program (those it still holds from w: were the windows
 * of a bucket ever to overlap, the later one's stay), and its buffer goes. A view the
 * program keeps past its readers (a reshape it aliases) would keep the memory alive:
 * counted until the run ends, when the program lets go of every value. */
static void drop(kn_dp *d, int w) {
    z3_window *x = &d->z3->win[w];
    const kn_dp_bucket *k = &d->buckets[x->bucket];
    for (int i = k->first_param; i <= k->last_param; i++)
        if (d->z3->param_win[i] == w) {
            (void)kn_program_supply(d->tr->prog, d->z3->param_node[i], NULL);
            d->z3->param_win[i] = -1;
        }
    int64_t nb = (k->hi - k->lo) * (int64_t)sizeof(float);
    if (x->buf && x->buf->storage->refcount > 1) d->z3->retained += nb;
    else d->gathered_live -= nb;
    kn_tensor_free(x->buf);
    x->buf = NULL;
    x->state = Z3_IDLE;
}

/* The step program's step hook: drop, supply, prefetch (the file's comment). */
static kn_status step_hook(void *ctx, int s) {
    kn_dp *d = ctx;
    kn_dp_z3 *z = d->z3;
    for (int w = 0; w < z->next_use; w++)
        if (z->win[w].state == Z3_LIVE && z->win[w].last < s) drop(d, w);
    for (; z->next_use < z->nwin && z->win[z->next_use].first <= s; z->next_use++) KN_TRY(use(d, z->next_use));
    if (z->next_use < z->nwin && z->win[z->next_use].state == Z3_IDLE) KN_TRY(start(d, z->next_use));
    return KN_OK;
}

kn_status kn_dp_z3_poll(kn_dp *d) {
    for (int w = 0; d->z3 && w < d->z3->nwin; w++) {
        z3_window *x = &d->z3->win[w];
        if (x->state != Z3_FLIGHT) continue;
        bool done = false;
        KN_TRY(kn_comm_test(&x->req, &done));
        if (done) gathered(d, x);
    }
    return KN_OK;
}

kn_status kn_dp_z3_end_run(kn_dp *d) {
    kn_status st = KN_OK;
    for (int w = 0; d->z3 && w < d->z3->nwin; w++) {
        z3_window *x = &d->z3->win[w];
        /* a gather in flight must finish before its buffer goes (after a failed run too) */
        if (x->state == Z3_FLIGHT) {
            kn_status ws = kn_comm_wait(&x->req);
            if (st == KN_OK) st = ws;
            gathered(d, x);
        }
        if (x->state != Z3_IDLE) drop(d, w);
    }
    if (d->z3) {
        d->gathered_live -= d->z3->retained;
        d->z3->retained = 0;
        d->z3->next_use = 0;
    }
    return st;
}

/* The evaluation program's parameters deferred, and the model's slab freed: between steps
 * this rank holds its shard only. */
static kn_status drop_slab(kn_dp *d) {
    kn_trainer *tr = d->tr;
    kn_params *p = &tr->model->p;
    for (int i = 0; i < p->count; i++) KN_TRY(kn_program_defer(tr->eval, p->info[i].name));
    kn_params_views_free(p, p->views);
    kn_tensor_free(p->slab);
    p->views = NULL;
    p->slab = NULL;
    p->data = NULL;
    tr->params = NULL;
    tr->views = NULL;
    return KN_OK;
}

kn_status kn_dp_z3_new(kn_dp *d) {
    kn_trainer *tr = d->tr;
    const kn_params *p = &tr->model->p;
    int64_t len = kn_dp_my_len(d);
    d->z3 = kn_calloc(1, sizeof *d->z3);
    size_t np = (size_t)(p->count > 0 ? p->count : 1);
    if (d->z3) d->z3->param_node = kn_malloc(np * sizeof(int32_t));
    if (d->z3) d->z3->param_win = kn_malloc(np * sizeof(int));
    d->param_shard = kn_malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
    if (!d->z3 || !d->z3->param_node || !d->z3->param_win || !d->param_shard)
        return kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the parameters' shard");
    for (int i = 0; i < p->count; i++) d->z3->param_win[i] = -1;
    memcpy(d->param_shard, p->data + kn_dp_my_lo(d), (size_t)len * sizeof(float));
    KN_TRY(plan(d));
    for (int i = 0; i < p->count; i++) KN_TRY(kn_program_defer(tr->prog, p->info[i].name));
    kn_program_set_step_hook(tr->prog, step_hook, d);
    return drop_slab(d);
}

kn_status kn_dp_z3_begin_step(kn_dp *d) { return d->tr->model->p.slab ? drop_slab(d) : KN_OK; }

kn_status kn_dp_z3_gather_params(kn_dp *d) {
    kn_trainer *tr = d->tr;
    kn_params *p = &tr->model->p;
    if (p->slab) return KN_OK;
    int64_t counts[1024], n = p->n;
    int N = d->comm->size;
    if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
    KN_TRY(kn_tensor_empty(&p->slab, KN_DT_F32, 1, &n));
    p->data = kn_tensor_data(p->slab);
    kn_status st = kn_comm_all_gather(d->comm, d->param_shard, p->data, counts, KN_DT_F32);
    if (st == KN_OK) st = kn_params_views(p, p->slab, &p->views);
    for (int i = 0; st == KN_OK && i < p->count; i++) st = kn_program_bind(tr->eval, p->info[i].name, p->views[i]);
    if (st != KN_OK) {
        (void)drop_slab(d);
        return st;
    }
    tr->params = p->slab;
    tr->views = p->views;
    return KN_OK;
}

void kn_dp_z3_free(kn_dp *d) {
    if (d->z3 && d->tr && d->tr->prog) {
        (void)kn_dp_z3_end_run(d);
        kn_program_set_step_hook(d->tr->prog, NULL, NULL);
        /* a gathered slab: both programs read it; else they say what is missing */
        const kn_params *p = &d->tr->model->p;
        for (int i = 0; p->slab && i < p->count; i++) {
            (void)kn_program_bind(d->tr->prog, p->info[i].name, p->views[i]);
            (void)kn_program_bind(d->tr->eval, p->info[i].name, p->views[i]);
        }
    }
    if (d->z3) {
        kn_free(d->z3->win);
        kn_free(d->z3->param_node);
        kn_free(d->z3->param_win);
        kn_free(d->z3->node_step);
        kn_free(d->z3);
        d->z3 = NULL;
    }
    kn_free(d->param_shard);
    d->param_shard = NULL;
}

int64_t kn_dp_z3_bytes_per_run(const kn_dp *d) {
    int64_t b = 0;
    for (int w = 0; d->z3 && w < d->z3->nwin; w++)
        b += (d->buckets[d->z3->win[w].bucket].hi - d->buckets[d->z3->win[w].bucket].lo) * (int64_t)sizeof(float);
    return b;
}

void kn_dp_z3_print_notes(FILE *f, const kn_dp *d, int32_t node) {
    const kn_dp_z3 *z = d->z3;
    int s = z && node >= 0 && node < kn_program_graph(d->tr->prog)->nnodes ? z->node_step[node] : -1;
    for (int w = 0; s >= 0 && w < z->nwin; w++) {
        const z3_window *x = &z->win[w];
        const kn_dp_bucket *k = &d->buckets[x->bucket];
        const char *ph = x->backward ? "backward" : "forward";
        if (x->last == s - 1)
            fprintf(f, "#   -> before step %d: free bucket %d's gathered parameters (%s: its last reader ran)\n", s,
                    x->bucket, ph);
        if (x->first == s)
            fprintf(f, "#   -> before step %d: wait for all_gather bucket %d (%s): slab [%lld, %lld), %lld bytes, "
                    "%s .. %s\n", s, x->bucket, ph, (long long)k->lo, (long long)k->hi,
                    (long long)((k->hi - k->lo) * 4), d->tr->model->p.info[k->first_param].name,
                    d->tr->model->p.info[k->last_param].name);
        /* the prefetch: window w starts when window w - 1 is waited for, unless both start here */
        if (w > 0 && z->win[w - 1].first == s && x->first > s)
            fprintf(f, "#   -> before step %d, after the wait: all_gather bucket %d (%s) starts, the prefetch for "
                    "step %d\n", s, x->bucket, ph, x->first);
    }
}
