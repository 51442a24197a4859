/* quant_epilogue.c — lab 12 unit: the int8 product's dequantizing epilogue (kn_i8_dequant;
 * contract in kiln/quant.h).
 *
 * An int8 product with activations quantized per row (scale sa[i]) and the weight per
 * output channel (scale sb[j]) sums the codes exactly in int32:
 *
 *     y[i][j] = sum_k x[i][k] W[k][j] ~ sa[i] * sb[j] * sum_k qa[i][k] qb[j][k]
 *
 * Both scales factor out of the sum, so they are applied once per output element, after
 * the integer sum: the epilogue turns a tile of int32 sums into f32 outputs,
 * c[i][j] = (float)acc[i][j] * sa[i] * sb[j]. The order of the two multiplications is part
 * of the contract ((acc * sa) * sb, left to right, in f32): (acc * sa) * sb and
 * acc * (sa * sb) can differ in the last bit, and every int8 kernel of kiln (the CPU
 * microkernels, the faster ones, and the GPU's, which replicate this function on the
 * device) must give the same bits. sa NULL means 1 for every row: the weight-only
 * quantized product (w8) and the products whose left operand is not quantized.
 *
 * The tile is `rows` x `cols` with its own strides: acc's rows are ldacc int32 apart (a
 * microkernel's register tile, 4 wide), c's are ldc floats apart (the whole output's
 * width); sa and sb are indexed from the tile's first row and column. A scale of NaN (a
 * row or a channel with a non-finite value, kn_quant_rows_i8) gives NaN, as it should. */
#include "kiln/quant.h"

void kn_i8_dequant(const int32_t *acc, int64_t rows, int64_t cols, int64_t ldacc, const float *sa, const float *sb,
                   float *c, int64_t ldc) {
    /* BEGIN SOLUTION */
    for (int64_t i = 0; i < rows; i++) {
        const float s = sa ? sa[i] : 1.0f;
        for (int64_t j = 0; j < cols; j++) c[i * ldc + j] = (float)acc[i * ldacc + j] * s * sb[j];
    }
    /* SKELETON
    // Each element of the tile: the int32 sum as a float, times the row's scale (1 when sa
    // is NULL), times the column's, in that order; acc and c with their own row strides.
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) c[i * ldc + j] = 0;
    (void)acc, (void)ldacc, (void)sa, (void)sb;
    kn_not_implemented("lab12", "kn_i8_dequant: the int8 product's dequantizing epilogue (quant_epilogue.c)");
    END SOLUTION */
}
