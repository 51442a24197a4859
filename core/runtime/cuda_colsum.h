/* cuda_colsum.h — the column reduction of core/runtime/cuda_colsum.cu (a sum, mean or max
 * over a strided axis: a bias gradient), as the CUDA backend's reduce calls it and as the
 * emulator runs it (tests/core/test_cuda_colsum.c). */
#ifndef KN_CUDA_COLSUM_H
#define KN_CUDA_COLSUM_H

#define KNR_V 4              /* columns a thread sums: col, col + 32, ..., col + 32 (KNR_V - 1) */
#define KNR_BY 8             /* thread rows of a block (32 x KNR_BY threads) */
#define KNR_TARGET 528       /* split the rows when one pass would have fewer blocks (4 per SM of an H100) */
#define KNR_MIN_CHUNK 64     /* fewest rows of a chunk */
#define KNR_TICKETS 1024     /* (outer, strip) pairs a split reduction may have (< KNR_TARGET) */

/* The launch of x [outer, r, inner] -> y [outer, inner]: grid (gx strips of 32 KNR_V columns,
 * gy outer indices, nchunk chunks of `chunk` rows). nchunk > 1: partials and tickets needed. */
typedef struct knr_plan {
    unsigned gx, gy;
    long long nchunk, chunk;
} knr_plan;

#ifndef __CUDACC__
/* The emulator's entries: part holds outer * nchunk * inner doubles (NULL when nchunk is 1),
 * ticket KNR_TICKETS zeros (left zero). 0, or -1 when the emulator failed. */
knr_plan knr_cols_plan(long long outer, long long r, long long inner);
int kn_colsum_emu_f32(const float *x, float *y, double *part, unsigned *ticket, long long outer, long long r,
                      long long inner, int is_max, int mean);
int kn_colsum_emu_f64(const double *x, double *y, double *part, unsigned *ticket, long long outer, long long r,
                      long long inner, int is_max, int mean);
#endif

#endif
