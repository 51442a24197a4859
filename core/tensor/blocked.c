/* blocked.c — lab 06 unit: packing and the cache-blocked loop nest of the CPU GEMM
 * (kn_gemm_pack_a_f32, kn_gemm_pack_b_f32, kn_gemm_rows_f32; contracts in kiln/gemm.h).
 *
 * The microkernel reads a 6-row panel of a and a 16-column panel of b at every depth kk.
 * In a row-major matrix the 6 numbers of a column of a are a whole row apart, and b's 16
 * are contiguous but the next kk is a row further: every kk would touch new cache lines
 * and new pages. PACKING copies each panel once into the order the microkernel reads it
 * (k-major: the MR or NR values of one kk side by side), so it streams both panels
 * through contiguous memory. The copy costs O(mk + kn) against the product's O(mnk).
 * Transposed operands (op(a) = a^T) only change where the packing reads from.
 *
 * BLOCKING keeps the panels in cache while they are reused. k is cut into blocks of kc:
 * one kc x 16 slice of a b panel (kc * 64 bytes) stays in L1 while the microkernel runs
 * down mcp row panels of a; those mcp x 6 x kc floats of a stay in L2 while every b panel
 * goes by. The loop nest, outermost first:
 *
 *     for each k block [pc, pc + kc)            the last block may be shorter
 *       for each group of mcp row panels        (L2)
 *         for each column panel jp of b          (its kc slice in L1)
 *           for each row panel ip of the group
 *             micro(a panel ip at depth pc, b panel jp at depth pc, kc, c block (ip, jp), first = pc == 0)
 *
 * The autotuner (tune.c) picks kc and mcp for this machine. Whatever they are, every c
 * element is the same sum in the same order (the microkernel's contract), so the results
 * do not change. */
#include "kiln/gemm.h"

void kn_gemm_pack_a_f32(const kn_gemm_f32 *x, int64_t p0, int64_t p1) {
    /* BEGIN SOLUTION */
    int64_t m = x->m, k = x->k;
    for (int64_t ip = p0; ip < p1; ip++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int r = 0; r < KN_GEMM_MR; r++) {
                int64_t i = ip * KN_GEMM_MR + r;
                x->ap[(ip * k + kk) * KN_GEMM_MR + r] = i < m ? (x->ta ? x->a[kk * m + i] : x->a[i * k + kk]) : 0.0f;
            }
    /* SKELETON
    (void)x, (void)p0, (void)p1;
    kn_not_implemented("lab06", "kn_gemm_pack_a_f32: row panels of op(a), k-major");
    END SOLUTION */
}

void kn_gemm_pack_b_f32(void *ctx, int64_t p0, int64_t p1) {
    const kn_gemm_f32 *x = ctx;
    /* BEGIN SOLUTION */
    int64_t n = x->n, k = x->k;
    for (int64_t jp = p0; jp < p1; jp++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int j = 0; j < KN_GEMM_NR; j++) {
                int64_t col = jp * KN_GEMM_NR + j;
                x->bp[(jp * k + kk) * KN_GEMM_NR + j] = col < n ? (x->tb ? x->b[col * k + kk] : x->b[kk * n + col]) : 0.0f;
            }
    /* SKELETON
    (void)x, (void)p0, (void)p1;
    kn_not_implemented("lab06", "kn_gemm_pack_b_f32: column panels of op(b), k-major");
    END SOLUTION */
}

void kn_gemm_rows_f32(void *ctx, int64_t p0, int64_t p1) {
    const kn_gemm_f32 *x = ctx;
    /* BEGIN SOLUTION */
    kn_gemm_pack_a_f32(x, p0, p1);
    int64_t npan = (x->n + KN_GEMM_NR - 1) / KN_GEMM_NR, k = x->k;
    for (int64_t pc = 0; pc < k || pc == 0; pc += x->kc) {
        int64_t kc = k - pc < x->kc ? k - pc : x->kc;
        for (int64_t ib = p0; ib < p1; ib += x->mcp) {
            int64_t ie = ib + x->mcp < p1 ? ib + x->mcp : p1;
            for (int64_t jp = 0; jp < npan; jp++) {
                int64_t j = jp * KN_GEMM_NR;
                int nr = (int)(x->n - j < KN_GEMM_NR ? x->n - j : KN_GEMM_NR);
                const float *bs = x->bp + jp * KN_GEMM_NR * k + pc * KN_GEMM_NR;
                for (int64_t ip = ib; ip < ie; ip++) {
                    int64_t i = ip * KN_GEMM_MR;
                    int mr = (int)(x->m - i < KN_GEMM_MR ? x->m - i : KN_GEMM_MR);
                    kn_gemm_micro_f32(x->ap + ip * KN_GEMM_MR * k + pc * KN_GEMM_MR, bs, kc, x->c + i * x->n + j, x->n, mr,
                                      nr, pc == 0);
                }
            }
        }
    }
    /* SKELETON
    (void)x, (void)p0, (void)p1;
    kn_not_implemented("lab06", "kn_gemm_rows_f32: pack a's panels, then the blocked loop nest around the microkernel");
    END SOLUTION */
}
