/* tp.c — tensor parallelism's runtime (kiln/mesh.h, "tensor parallelism"): the device mesh
 * of `--mesh`, and the context that runs a rank's value collectives over the mesh axes'
 * communicators.
 *
 * The placement pass (core/passes/place.c) turns the joint graph into each rank's local
 * graph with all_reduce / all_gather / reduce_scatter nodes in it; whoever runs that graph
 * (an interpreter, a program) hands those nodes to the kn_collectives made here. The
 * communicator of axis A does the sum or the concatenation; a gather or scatter along a
 * dim d > 0 is a collective over the leading layout plus one strided 2-D copy (the blocks
 * of rank q are rows q*Dl.. of every outer index), on whatever device the tensors are.
 * MPI cannot add 16-bit floats: a bf16/fp16 sum over MPI (CPU ranks) is made in f32 and
 * rounded once. Each collective is waited for through kn_comm_wait_device: the host waits
 * (under KILN_COMM_TIMEOUT), except with KILN_COMM_STREAM_ORDER=1 over NCCL, where the GPU's
 * compute stream waits and the host queues on; the context's poll looks at what ended
 * between nodes and its finish waits for the rest when the run ends. On 2 H200s
 * (2026-11-28) tp=2 ran at 348.0k tokens/s either way: the host's waits were not what held
 * tp back (core/dist/NOTES.md). */
#include <stdlib.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/mesh.h"

/* ---------------------------------------------------------------- the mesh */

static const char *const axis_names[KN_MESH_AXES] = {"dp", "tp", "pp"};

kn_status kn_mesh_parse(const char *text, int ranks, kn_mesh *out) {
    if (!text || !out) return kn_error(KN_ERR_ARG, "--mesh: no mesh given");
    kn_mesh m = {.size = {1, 1, 1}};
    bool seen[KN_MESH_AXES] = {false};
    const char *p = text;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        if (!comma) comma = p + strlen(p);
        if (!eq || eq > comma)
            return kn_error(KN_ERR_ARG, "--mesh %s: expected AXIS=SIZE, got '%.*s' (axes dp, tp, pp)", text,
                            (int)(comma - p), p);
        int a = -1;
        for (int i = 0; i < KN_MESH_AXES; i++)
            if ((size_t)(eq - p) == strlen(axis_names[i]) && !strncmp(p, axis_names[i], (size_t)(eq - p))) a = i;
        if (a < 0) return kn_error(KN_ERR_ARG, "--mesh %s: unknown axis '%.*s' (dp, tp, pp)", text, (int)(eq - p), p);
        if (seen[a]) return kn_error(KN_ERR_ARG, "--mesh %s: axis %s given twice", text, axis_names[a]);
        char *end = NULL;
        long v = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || end != comma || v < 1 || v > 1 << 20)
            return kn_error(KN_ERR_ARG, "--mesh %s: the size of %s must be an integer >= 1, got '%.*s'", text,
                            axis_names[a], (int)(comma - eq - 1), eq + 1);
        seen[a] = true;
        m.size[a] = (int)v;
        m.order[m.naxes++] = a;
        p = *comma ? comma + 1 : comma;
        if (*comma && !*p) return kn_error(KN_ERR_ARG, "--mesh %s: a trailing comma", text);
    }
    if (m.naxes == 0) return kn_error(KN_ERR_ARG, "--mesh: empty mesh (expected e.g. tp=2)");
    long prod = (long)m.size[0] * m.size[1] * m.size[2];
    if (ranks > 0 && prod != ranks)
        return kn_error(KN_ERR_ARG, "--mesh %s: %ld ranks, but the job has %d (mpiexec -n %ld)", text, prod, ranks,
                        prod);
    *out = m;
    return KN_OK;
}

kn_status kn_mesh_check_gpt(const kn_mesh *m, const kn_gpt_config *cfg) {
    if (!m || !cfg) return kn_error(KN_ERR_ARG, "kn_mesh_check_gpt: NULL argument");
    int tp = m->size[KN_MESH_TP];
    struct { const char *what; long n; } dims[] = {
        {"heads", cfg->heads}, {"width", cfg->width}, {"4 * width", 4L * cfg->width}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].n % tp)
            return kn_error(KN_ERR_ARG, "--mesh tp=%d: the model's %s (%ld) is not a multiple of tp", tp, dims[i].what,
                            dims[i].n);
    return KN_OK;
}

bool kn_mesh_vocab_split(const kn_mesh *m, const kn_gpt_config *cfg) {
    return m && cfg && cfg->vocab % m->size[KN_MESH_TP] == 0;
}

kn_status kn_mesh_comms(const kn_mesh *m, kn_comm *c, kn_comm **axes, int *coords) {
    if (!m || !c || !axes || !coords) return kn_error(KN_ERR_ARG, "kn_mesh_comms: NULL argument");
    int dims[KN_MESH_AXES];
    kn_comm *sub[KN_MESH_AXES] = {NULL};
    int sc[KN_MESH_AXES] = {0};
    for (int i = 0; i < m->naxes; i++) dims[i] = m->size[m->order[i]];
    kn_status st = kn_comm_mesh(c, m->naxes, dims, sub, sc);
    if (st != KN_OK) return st;
    for (int a = 0; a < KN_MESH_AXES; a++) axes[a] = NULL, coords[a] = 0;
    for (int i = 0; i < m->naxes; i++) axes[m->order[i]] = sub[i], coords[m->order[i]] = sc[i];
    return KN_OK;
}

/* ---------------------------------------------------------------- the value collectives */

/* The split of a tensor of type t around dim d: outer (dims before), the dim, inner (after). */
static void around(const kn_tensor *t, int d, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

static kn_status tp_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out);

/* A sum of 16-bit floats over a backend that cannot add them (MPI): in f32, rounded once
 * at the end (what NCCL's bf16 sum does too). */
static kn_status sum_in_f32(void *ctx, int32_t id, const kn_node *n, const kn_tensor *x, kn_tensor *out) {
    kn_tensor *x32 = NULL, *o32 = NULL;
    kn_status st = kn_tensor_cast(&x32, x, KN_DT_F32);
    if (st == KN_OK) st = kn_tensor_empty(&o32, KN_DT_F32, out->ndim, out->shape);
    const kn_tensor *in1[1] = {x32};
    if (st == KN_OK) st = tp_run(ctx, id, n, in1, o32);
    if (st == KN_OK) st = kn_tensor_copy_into(out, o32);
    kn_tensor_free(x32), kn_tensor_free(o32);
    return st;
}

static kn_status tp_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    kn_tp_comms *t = ctx;
    const char *name = kn_op_name(n->op);
    if (n->attrs.mesh < 0 || n->attrs.mesh >= KN_MESH_AXES || !t->axes[n->attrs.mesh])
        return kn_error(KN_ERR_ARG, "%%%d = %s: no communicator for mesh axis %lld", (int)id, name,
                        (long long)n->attrs.mesh);
    kn_comm *c = t->axes[n->attrs.mesh];
    if (c->size != n->attrs.parts)
        return kn_error(KN_ERR_ARG, "%%%d = %s: {parts=%lld} but mesh axis %lld has %d ranks", (int)id, name,
                        (long long)n->attrs.parts, (long long)n->attrs.mesh, c->size);
    const kn_tensor *x = in[0];
    int N = c->size;
    size_t es = kn_dtype_size(x->dtype);
    kn_device dev = x->storage->device;
    int64_t numel = kn_tensor_numel(x);
    char label[32];
    snprintf(label, sizeof label, "%%%d", (int)id);
    if ((n->op == KN_OP_ALL_REDUCE || n->op == KN_OP_REDUCE_SCATTER) && c->be->type == KN_COMM_MPI &&
        (x->dtype == KN_DT_BF16 || x->dtype == KN_DT_F16))
        return sum_in_f32(ctx, id, n, x, out);
    switch ((int)n->op) {
    case KN_OP_ALL_REDUCE: {
        kn_comm_req r;
        KN_TRY(kn_comm_iall_reduce(c, kn_tensor_data(x), kn_tensor_data(out), numel, x->dtype, label, &r));
        return kn_comm_wait_device(&r);
    }
    case KN_OP_ALL_GATHER:
    case KN_OP_REDUCE_SCATTER: {
        bool gather = n->op == KN_OP_ALL_GATHER;
        const kn_tensor *local = gather ? x : out; /* the rank's block */
        int d = (int)n->attrs.axis;
        int64_t outer, inner, count = kn_tensor_numel(local);
        around(local, d, &outer, &inner);
        int64_t *counts = malloc((size_t)N * sizeof *counts);
        if (!counts) return kn_error(KN_ERR_OOM, "%%%d = %s: out of memory", (int)id, name);
        for (int q = 0; q < N; q++) counts[q] = count;
        kn_status st;
        if (outer == 1) { /* the blocks are contiguous already */
            kn_comm_req r;
            st = gather ? kn_comm_iall_gather(c, kn_tensor_data(x), kn_tensor_data(out), counts, x->dtype, label, &r)
                        : kn_comm_ireduce_scatter(c, kn_tensor_data(x), kn_tensor_data(out), counts, x->dtype, label, &r);
            free(counts);
            return st == KN_OK ? kn_comm_wait_device(&r) : st;
        }
        /* rank q's block along d: rows of local->shape[d] * inner elements, one per outer index */
        kn_tensor *tmp = NULL;
        int64_t n_all = count * N;
        st = kn_tensor_empty_on(&tmp, dev, x->dtype, 1, &n_all);
        size_t row = (size_t)(local->shape[d] * inner) * es;
        if (st == KN_OK && gather) {
            kn_comm_req r;
            st = kn_comm_iall_gather(c, kn_tensor_data(x), kn_tensor_data(tmp), counts, x->dtype, label, &r);
            if (st == KN_OK) st = kn_comm_wait_device(&r); /* the copies below queue after it */
            for (int q = 0; q < N && st == KN_OK; q++)
                st = kn_device_memcpy_2d(dev, (char *)kn_tensor_data(out) + q * row, row * N,
                                         (char *)kn_tensor_data(tmp) + (size_t)q * count * es, row, row, (size_t)outer);
        } else if (st == KN_OK) {
            for (int q = 0; q < N && st == KN_OK; q++)
                st = kn_device_memcpy_2d(dev, (char *)kn_tensor_data(tmp) + (size_t)q * count * es, row,
                                         (const char *)kn_tensor_data(x) + q * row, row * N, row, (size_t)outer);
            kn_comm_req r;
            if (st == KN_OK) st = kn_comm_ireduce_scatter(c, kn_tensor_data(tmp), kn_tensor_data(out), counts, x->dtype,
                                                          label, &r);
            if (st == KN_OK) st = kn_comm_wait_device(&r); /* tmp is freed in stream order, after it */
        }
        kn_tensor_free(tmp);
        free(counts);
        return st;
    }
    case KN_OP_SEND:
        return kn_comm_send(c, kn_tensor_data(x), numel, x->dtype, (int)n->attrs.peer);
    case KN_OP_RECV:
        return kn_comm_recv(c, kn_tensor_data(out), kn_tensor_numel(out), out->dtype, (int)n->attrs.peer);
    default:
        return kn_error(KN_ERR_UNSUPPORTED, "%%%d = %s: not a value collective (tensor parallelism runs only those)",
                        (int)id, name);
    }
}

/* Between nodes: look at what ended (releases it; a failed or overdue one is reported). */
static kn_status tp_poll(void *ctx) {
    kn_tp_comms *t = ctx;
    for (int a = 0; a < KN_MESH_AXES; a++)
        if (t->axes[a] && t->axes[a]->npending) KN_TRY(kn_comm_reap(t->axes[a]));
    return KN_OK;
}

/* After the run: the host waits for every collective the GPU waited for. */
static kn_status tp_finish(void *ctx) {
    kn_tp_comms *t = ctx;
    for (int a = 0; a < KN_MESH_AXES; a++)
        if (t->axes[a]) KN_TRY(kn_comm_drain(t->axes[a]));
    return KN_OK;
}

void kn_tp_collectives(kn_tp_comms *t, kn_collectives *out) {
    if (!out) return;
    out->ctx = t;
    out->run = tp_run;
    out->poll = tp_poll;
    out->finish = tp_finish;
}
