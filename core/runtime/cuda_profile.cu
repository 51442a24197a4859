/* cuda_profile.cu — the per-op profile of the eager path (kiln/cuda.h).
 *
 * While a profile is on, kn_cuda_node_eval calls knc_profile_begin before an op's kernel
 * and knc_profile_end after it: two events on the default stream around the op, and a
 * wait for the second, so the elapsed time is that op's alone. Waiting after every op
 * stops the host from running ahead of the GPU, which is why this is a separate mode and
 * not always on; the step it measures is slower than a real one, but the sum of the op
 * times is the GPU time of the ops (launch gaps are not in it).
 *
 * Groups: op name, operand shapes and (matmul) the transpose flags, e.g.
 * "matmul [8192,768]x[2304,768] tb". The bytes of a group are those of its operands and
 * results (what a kernel that reads each once and writes once moves), the flops those of
 * matmul (2 m n k); the report turns them into GB/s and GFLOP/s, and the GB/s of every
 * memory-bound group into a fraction of the device's copy bandwidth, measured when the
 * profile starts (measure_copy). The report can also write one TSV line per group, for
 * plots/profile.sh. */
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_impl.h"

#define KNC_PROF_MAX 1024

typedef struct prof_row {
    char key[120];
    const char *op;
    int64_t calls;
    double ms, bytes, flops;
} prof_row;

static struct {
    bool on;
    int n;
    prof_row rows[KNC_PROF_MAX];
    cudaEvent_t e0, e1;
    bool have_events;
    int device;
    double copy_gbs; /* measured device-to-device copy bandwidth, bytes read + written */
} prof;

bool knc_profile_on(void) { return prof.on; }

/* The ceiling the memory-bound ops are measured against: a 256 MiB device-to-device
 * cudaMemcpy, timed with events over 5 copies after one warm-up, counting each byte read
 * and written (so a kernel that reads one tensor and writes one of the same size is at
 * 100% when it is as fast as the copy). Buffers come from cudaMalloc directly, not the
 * caching allocator, so kiln's memory statistics do not see them. */
static kn_status measure_copy(int device, double *gbs) {
    const size_t n = (size_t)256 << 20;
    void *a = nullptr, *b = nullptr;
    float ms = 0;
    KN_CUDA_TRY(cudaSetDevice(device));
    KN_CUDA_TRY(cudaMalloc(&a, n));
    cudaError_t e = cudaMalloc(&b, n);
    if (e == cudaSuccess) e = cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    if (e == cudaSuccess) e = cudaEventRecord(prof.e0, 0);
    for (int i = 0; i < 5 && e == cudaSuccess; i++) e = cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess) e = cudaEventRecord(prof.e1, 0);
    if (e == cudaSuccess) e = cudaEventSynchronize(prof.e1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, prof.e0, prof.e1);
    cudaFree(a);
    if (b) cudaFree(b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_profile_start: measuring the copy bandwidth of cuda:%d: %s", device,
                        cudaGetErrorString(e));
    }
    *gbs = 5.0 * 2.0 * (double)n / ((double)ms * 1e6);
    return KN_OK;
}

extern "C" kn_status kn_cuda_profile_start(int device) {
    KN_TRY(kn_device_check("kn_cuda_profile_start", kn_device{KN_DEVICE_CUDA, device}));
    if (!prof.have_events) {
        KN_CUDA_TRY(cudaEventCreate(&prof.e0));
        cudaError_t e = cudaEventCreate(&prof.e1);
        if (e != cudaSuccess) {
            cudaEventDestroy(prof.e0);
            (void)cudaGetLastError();
            return kn_error(KN_ERR_DEVICE, "kn_cuda_profile_start: cudaEventCreate: %s", cudaGetErrorString(e));
        }
        prof.have_events = true;
    }
    if (!prof.copy_gbs || prof.device != device) KN_TRY(measure_copy(device, &prof.copy_gbs));
    prof.device = device;
    prof.n = 0;
    prof.on = true;
    return KN_OK;
}

kn_status knc_profile_begin(void) {
    KN_CUDA_TRY(cudaEventRecord(prof.e0, 0));
    return KN_OK;
}

static int shape_str(char *buf, size_t cap, const kn_tensor *t) {
    int k = snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < (int)cap; d++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, "]");
    return k;
}

kn_status knc_profile_end(const kn_node *n, const kn_tensor *const *in, const kn_tensor *out) {
    return knc_profile_end_as(kn_op_name(n->op), n, in, out);
}

kn_status knc_profile_end_as(const char *name, const kn_node *n, const kn_tensor *const *in, const kn_tensor *out) {
    float ms = 0;
    KN_CUDA_TRY(cudaEventRecord(prof.e1, 0));
    KN_CUDA_TRY(cudaEventSynchronize(prof.e1));
    KN_CUDA_TRY(cudaEventElapsedTime(&ms, prof.e0, prof.e1));
    char key[sizeof prof.rows[0].key];
    int k = snprintf(key, sizeof key, "%s ", name);
    double bytes = out ? (double)kn_tensor_numel(out) * (double)kn_dtype_size(out->dtype) : 0, flops = 0;
    for (int i = 0; i < n->nin && k < (int)sizeof key; i++) {
        if (i) k += snprintf(key + k, sizeof key - (size_t)k, "x");
        if (k < (int)sizeof key) k += shape_str(key + k, sizeof key - (size_t)k, in[i]);
        bytes += (double)kn_tensor_numel(in[i]) * (double)kn_dtype_size(in[i]->dtype);
    }
    bool ep = n->op == KN_OP_MATMUL_BIAS || n->op == KN_OP_MATMUL_BIAS_GELU || n->op == KN_OP_MATMUL_DGELU ||
              n->op == KN_OP_MATMUL_BGRAD; /* a product with an epilogue: the product's flops */
    if ((n->op == KN_OP_MATMUL || ep) && out) {
        const kn_tensor *a = in[0], *b = in[1];
        int64_t kk = n->attrs.ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        double mn = ep ? (double)(n->attrs.ta ? a->shape[1] : a->shape[0]) * (double)(n->attrs.tb ? b->shape[0] : b->shape[1])
                         : (double)kn_tensor_numel(out);
        flops = 2.0 * mn * (double)kk;
        if (k < (int)sizeof key) snprintf(key + k, sizeof key - (size_t)k, "%s%s", n->attrs.ta ? " ta" : "", n->attrs.tb ? " tb" : "");
    }
    prof_row *r = NULL;
    for (int i = 0; i < prof.n && !r; i++)
        if (!strcmp(prof.rows[i].key, key)) r = &prof.rows[i];
    if (!r && prof.n < KNC_PROF_MAX) {
        r = &prof.rows[prof.n++];
        memset(r, 0, sizeof *r);
        snprintf(r->key, sizeof r->key, "%s", key);
        r->op = name;
    }
    if (r) {
        r->calls++;
        r->ms += ms;
        r->bytes += bytes;
        r->flops += flops;
    }
    return KN_OK;
}

static int by_ms(const void *a, const void *b) {
    double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
    return (x < y) - (x > y);
}

static void print_row(FILE *f, const prof_row *r, double total) {
    char rate[48];
    double gbs = r->bytes / (r->ms * 1e6);
    if (r->flops > 0) snprintf(rate, sizeof rate, "%8.0f GFLOP/s       ", r->flops / (r->ms * 1e6));
    else snprintf(rate, sizeof rate, "%8.0f GB/s (%3.0f%%)", gbs, 100.0 * gbs / prof.copy_gbs);
    fprintf(f, "  %9.3f  %5.1f%%  %6lld  %s  %s\n", r->ms, total > 0 ? 100.0 * r->ms / total : 0.0,
            (long long)r->calls, rate, r->key);
}

/* One line per group: key, op, calls, ms, bytes, flops, GB/s, GFLOP/s, fraction of the
 * copy bandwidth (memory-bound groups; 0 for matmul). */
static void write_tsv(FILE *t) {
    fprintf(t, "# kiln per-op profile; copy bandwidth %.1f GB/s (device-to-device, read + write)\n", prof.copy_gbs);
    fprintf(t, "key\top\tcalls\tms\tbytes\tflops\tgbs\tgflops\tof_copy\n");
    for (int i = 0; i < prof.n; i++) {
        const prof_row *r = &prof.rows[i];
        double gbs = r->ms > 0 ? r->bytes / (r->ms * 1e6) : 0, gf = r->ms > 0 ? r->flops / (r->ms * 1e6) : 0;
        fprintf(t, "%s\t%s\t%lld\t%.6f\t%.0f\t%.0f\t%.3f\t%.3f\t%.4f\n", r->key, r->op, (long long)r->calls, r->ms,
                r->bytes, r->flops, gbs, gf, r->flops > 0 ? 0.0 : gbs / prof.copy_gbs);
    }
}

extern "C" kn_status kn_cuda_profile_report(FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms) {
    if (!f) return kn_error(KN_ERR_ARG, "kn_cuda_profile_report: NULL file");
    if (!prof.on) return kn_error(KN_ERR_ARG, "kn_cuda_profile_report: no profile was started");
    prof.on = false;
    qsort(prof.rows, (size_t)prof.n, sizeof prof.rows[0], by_ms);
    double total = 0;
    for (int i = 0; i < prof.n; i++) total += prof.rows[i].ms;
    if (ops_ms) *ops_ms = total;
    if (tsv) write_tsv(tsv);
    fprintf(f, "per-op GPU time (%d groups, %.2f ms in ops%s); measured copy bandwidth %.0f GB/s:\n", prof.n, total,
            prof.n == KNC_PROF_MAX ? "; the table filled up, later groups are missing" : "", prof.copy_gbs);
    fprintf(f, "  %9s  %6s  %6s  %22s  %s\n", "ms", "share", "calls", "rate (of copy bw)", "op operands");
    int shown = top > 0 && top < prof.n ? top : prof.n;
    for (int i = 0; i < shown; i++) print_row(f, &prof.rows[i], total);
    if (shown < prof.n) fprintf(f, "  ... %d smaller groups\n", prof.n - shown);
    /* by op: merge groups of the same op name */
    prof_row ops[KN_OP_COUNT];
    int no = 0;
    for (int i = 0; i < prof.n; i++) {
        prof_row *r = NULL;
        for (int j = 0; j < no && !r; j++)
            if (ops[j].op == prof.rows[i].op) r = &ops[j];
        if (!r) {
            r = &ops[no++];
            memset(r, 0, sizeof *r);
            r->op = prof.rows[i].op;
            snprintf(r->key, sizeof r->key, "%s", r->op);
        }
        r->calls += prof.rows[i].calls;
        r->ms += prof.rows[i].ms;
        r->bytes += prof.rows[i].bytes;
        r->flops += prof.rows[i].flops;
    }
    qsort(ops, (size_t)no, sizeof ops[0], by_ms);
    fprintf(f, "per op:\n");
    for (int i = 0; i < no; i++) print_row(f, &ops[i], total);
    if (step_ms > 0)
        fprintf(f, "outside ops: %.2f ms of the %.2f ms profiled step (generated kernels, clip, optimizer, host waits)\n",
                step_ms - total, step_ms);
    return KN_OK;
}
