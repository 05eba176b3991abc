/* The products and the attention of a decoding step, and whole decoder layers, for the CPU.
 *
 * half_matmul: y[m, n] = sum_k x[m, k] * w[n, k], float32 rows times float16 weights;
 * weights_matmul: the same with the weights in any storage format of block_formats.h (GGUF's
 * blocks, F32, BF16, F16):
 * - short products (at most INT8_ROWS rows: decoding steps, verification passes) of quantized
 *   weights, and every product of K-quant weights (`int8_path`), take the int8 path of
 *   int8_products.h / kquant_products.h: each row quantized once to int8, integer
 *   dot products per weight unit, the scales applied in float (llama.cpp's way: the weights'
 *   own codes, 64 multiply-adds per vpdpbusd; a decoding step reads Q8_0 weights at ~34 GB/s
 *   here against ~10 through the float path, docs/latency.md);
 * - the others (prompts of legacy-format weights; F32/BF16 weights) de-quantize the weights exactly to float32 into a
 *   per-thread panel (PANEL_ROWS rows, or WIDE_BLOCKS blocks of NB outputs for a prompt) and
 *   multiply it with the float tiles that float16 weights take.
 * dequantize_matrix: rows of a matrix in any format as float32, exactly gguf's values.
 *
 * Why by hand: PyTorch's CPU product with float16 weights runs one row at a time (n rows cost
 * n single-row products, so a speculative verification of 8 positions costs 8 steps), MKL has
 * no float16 or block product, and no library promises a result that does not depend on the
 * number of rows. Here every output element is the same sequence of operations whatever the
 * number of rows or threads: float products 8-wide (16 with AVX-512) FMAs over k in order, then
 * one fixed horizontal sum; int8 products the fixed order of int8_products.h. A verification
 * pass of n rows therefore gives bit for bit the logits that n single steps give, which keeps
 * speculative decoding lossless, and reads the weights once for all rows.
 *
 * row_attention: PyTorch's fused attention splits the keys into blocks whose size depends on the
 * number of query rows, so a row's softmax sums in another order in a verification pass than
 * in a single step. Here each (head, row) pair is computed on its own: scores, max, exponentials
 * (a fixed polynomial), sum and weighted values, all in key order; the cost is also lower than
 * PyTorch's for one row (reading the cache once per head). The cache holds float32 or float16
 * keys and values (`half`), converted exactly to float32 when read.
 *
 * decoder_layers: a whole decoder layer, or all the layers of a short pass, in one
 * call and one OpenMP parallel region (below).
 *
 * Builds (lsp_server/model/kernels/library.py): "avx512" (-mavx2 -mfma -mf16c -mavx512f, with
 * -mavx512bw -mavx512vnni where the CPU has them), "avx2" (-mavx2 -mfma -mf16c) and "portable"
 * (no instruction-set flags, -ffp-contract=off: simd.h's plain C), each -O3 -fopenmp -shared
 * -fPIC. The OpenMP runtime is the one PyTorch already loaded (same soname, libgomp.so.1).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"
#include "block_formats.h"
#include "int8_products.h"
#include "kquant_products.h"

#define NB 16 /* outputs per parallel block: 16 weight rows stay in L2 for every row group */
#define PANEL_ROWS 8 /* weight rows de-quantized at a time (a divisor of NB) */

/* Which build this is: 2 AVX-512, 1 AVX2, 0 portable (library.py checks it when loading). */
int kernel_isa(void) {
#if defined(__AVX512F__)
    return 2;
#elif defined(KERNEL_X86)
    return 1;
#else
    return 0;
#endif
}

/* mt rows of x (from row m0) times nt weight rows (from n0; weight row n at row n - w0 of `w`,
 * float32 where `f32`, else float16), in vectors of type VT holding W values (weight vectors from
 * WEIGHTS, at most NTMAX of them); the counts and `f32` are constants at every call site, so
 * the loops unroll and the accumulators live in registers. The weights' values, not their
 * storage, decide the result: a float16 weight converted and the same value de-quantized give
 * the same FMAs. */
#define DEFINE_TILE(NAME, VT, W, NTMAX, ZERO, LOADX, WEIGHTS, FMADD, HSUM)                                    \
    ALWAYS_INLINE void NAME(const float *x, const void *w, int w0, float *y, int N, int K, int m0, int n0,    \
                            const int mt, const int nt, const int f32) {                                      \
        VT acc[6][NTMAX];                                                                                     \
        for (int i = 0; i < mt; i++)                                                                          \
            for (int j = 0; j < nt; j++) acc[i][j] = ZERO();                                                  \
        for (int k = 0; k < K; k += W) {                                                                      \
            VT wv[NTMAX];                                                                                     \
            for (int j = 0; j < nt; j++) wv[j] = WEIGHTS(w, (int64_t)(n0 + j - w0), K, k, f32);               \
            for (int i = 0; i < mt; i++) {                                                                    \
                VT xv = LOADX(x + (int64_t)(m0 + i) * K + k);                                                 \
                for (int j = 0; j < nt; j++) acc[i][j] = FMADD(xv, wv[j], acc[i][j]);                         \
            }                                                                                                 \
        }                                                                                                     \
        for (int i = 0; i < mt; i++)                                                                          \
            for (int j = 0; j < nt; j++) y[(int64_t)(m0 + i) * N + n0 + j] = HSUM(acc[i][j]);                 \
    }

/* 8 weights of row `row` (relative to the weights' first row) from column k: float16 converted,
 * or float32 (a de-quantized panel, or F32 weights) */
ALWAYS_INLINE v8 weights8(const void *w, int64_t row, int K, int k, const int f32) {
    if (f32) return v8_load((const float *)w + row * K + k);
    return v8_load_half((const uint16_t *)w + row * K + k);
}

DEFINE_TILE(tile, v8, 8, 4, v8_zero, v8_load, weights8, v8_fma, v8_hsum)

#ifdef __AVX512F__
/* With AVX-512 (a build for a CPU that has it): the same tile with 16-wide vectors, for K a
 * multiple of 16. Its 32 registers hold wider tiles, so fewer weight conversions per FMA. An
 * output element's operations still depend only on K: 16-wide FMAs over k in order, then the
 * two halves added and `v8_hsum`. */
static inline float hsum16(__m512 v) {
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return v8_hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

ALWAYS_INLINE __m512 weights16(const void *w, int64_t row, int K, int k, const int f32) {
    if (f32) return _mm512_loadu_ps((const float *)w + row * K + k);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + row * K + k)));
}

DEFINE_TILE(tile16, __m512, 16, 8, _mm512_setzero_ps, _mm512_loadu_ps, weights16, _mm512_fmadd_ps, hsum16)
#endif

/* `nt` outputs at a time, then one at a time up to n1 */
#define TILES(TILE, MT, NT)                                                          \
    for (; n + NT <= n1; n += NT) TILE(x, w, w0, y, N, K, m0, n, MT, NT, f32);      \
    for (; n < n1; n++) TILE(x, w, w0, y, N, K, m0, n, MT, 1, f32);                 \
    break;

/* the tiles of a row group of mt (1-6) rows: NTm outputs at a time for m rows */
#define ROW_TILES(TILE, NT1, NT2, NT3, NT4, NT5, NT6) \
    switch (mt) {                                     \
    case 1: TILES(TILE, 1, NT1)                       \
    case 2: TILES(TILE, 2, NT2)                       \
    case 3: TILES(TILE, 3, NT3)                       \
    case 4: TILES(TILE, 4, NT4)                       \
    case 5: TILES(TILE, 5, NT5)                       \
    default: TILES(TILE, 6, NT6)                      \
    }

/* one row group (1-6 rows) over outputs [n0, n1): accumulators, the weight vectors and an x
 * vector fill at most the 16 registers (32 with AVX-512) */
ALWAYS_INLINE void rows_block_of(const float *x, const void *w, int w0, float *y, int N, int K, int m0, int mt,
                                int n0, int n1, const int f32) {
    int n = n0;
#ifdef __AVX512F__
    if (K % 16 == 0) {
        ROW_TILES(tile16, 8, 8, 6, 4, 4, 4)
        return;
    }
#endif
    ROW_TILES(tile, 4, 4, 3, 2, 2, 2)
}

/* rows_block_of compiled for each weight storage: float16 rows (w0 = 0) or float32 rows */
static void rows_block(const float *x, const void *w, int w0, float *y, int N, int K, int m0, int mt, int n0,
                       int n1, int f32) {
    if (f32) rows_block_of(x, w, w0, y, N, K, m0, mt, n0, n1, 1);
    else rows_block_of(x, w, w0, y, N, K, m0, mt, n0, n1, 0);
}

/* every row group (as even sizes as can be, at most 6 rows) over outputs [n0, n1) */
static void row_groups(const float *x, const void *w, int w0, float *y, int M, int N, int K, int n0, int n1,
                       int f32) {
    int groups = (M + 5) / 6;
    for (int g = 0, m0 = 0; g < groups; g++) {
        int mt = (M - m0) / (groups - g);
        rows_block(x, w, w0, y, N, K, m0, mt, n0, n1, f32);
        m0 += mt;
    }
}

static inline int blocks_of(int N) { return (N + NB - 1) / NB; }

/* weight rows [n0, n1) of a matrix in format f as float32, row n at panel + (n - n0) * K */
static void dequantize_rows(const uint8_t *w, int f, int K, int n0, int n1, float *panel) {
    int64_t rb = row_bytes(f, K);
    for (int n = n0; n < n1; n++) dequantize_row(w + (int64_t)n * rb, f, K, panel + (int64_t)(n - n0) * K);
}

/* The rows of a product: x [M, K] float32, and where the int8 path applies (`int8_path`), the
 * rows quantized (`acts`, quantize_rows). */
typedef struct {
    const float *x;
    const uint8_t *acts;
    int M, K;
    const uint8_t *kacts; /* the rows as the K-quant products take them (quantize_rows_k) */
    const uint8_t *keep; /* per output, nonzero where it is wanted (NULL: all); the others -inf */
} Rows;

/* K-quant weights take it whatever the number of rows (a prompt's too): their sub-block scales
 * apply in integers, two float operations per super-block and row, which beats de-quantizing the
 * weights for the float tiles (a prompt's 512 tokens: StarCoder2-3B's layer shape 5.8 -> 4.6 ms a
 * token, Qwen2.5-Coder-0.5B's Q4_K_M file 5.4 -> 4.9, Gemma 3 270M's 1.83 -> 1.77; llama.cpp
 * quantizes a prompt's rows too). The legacy formats' per-unit float work makes their int8 path
 * the slower one past INT8_ROWS rows (SmolLM2's prompt 2.1 -> 2.9 ms a token). */
static inline int int8_path(int f, int M) { return format_quantized(f) && (M <= INT8_ROWS || is_kquant(f)); }

/* block b of outputs (NB of them, fewer at the end) for every row: the parallel task of a product.
 * Float16 and F32 weights are multiplied as they are; quantized ones by the int8 path for a
 * short product, else (and BF16 ones) de-quantized into `panel` (the calling thread's,
 * PANEL_ROWS * K floats used) PANEL_ROWS weight rows at a time, once for all the rows of x.
 * Which tiles compute an output changes nothing in its arithmetic. */
static void matmul_block(const Rows *r, const void *w, int f, float *y, int N, int b, float *panel) {
    int M = r->M, K = r->K, n0 = b * NB, n1 = n0 + NB < N ? n0 + NB : N;
    if (f == W_F16 || f == W_F32) {
        row_groups(r->x, w, 0, y, M, N, K, n0, n1, f == W_F32);
        return;
    }
    if (int8_path(f, M)) {
        if (is_kquant(f)) kq_block(r->kacts, w, f, y, M, N, K, n0, n1, r->keep);
        else int_block(r->acts, w, f, y, M, N, K, n0, n1, r->keep);
        return;
    }
    /* PANEL_ROWS weight rows at a time, de-quantized, then every row group over them: the
     * panel (PANEL_ROWS * K floats) stays in L1 for all the row groups */
    for (int s0 = n0; s0 < n1; s0 += PANEL_ROWS) {
        int s1 = s0 + PANEL_ROWS < n1 ? s0 + PANEL_ROWS : n1;
        dequantize_rows(w, f, K, s0, s1, panel);
        row_groups(r->x, panel, s0, y, M, N, K, s0, s1, 1);
    }
}

/* x: [M, K] float32, w: [N, K] float16 bits, y: [M, N] float32; K a multiple of 8. */
void half_matmul(const float *x, const uint16_t *w, float *y, int M, int N, int K, int threads) {
    int blocks = blocks_of(N);
    Rows r = {x, NULL, M, K};
#pragma omp parallel for num_threads(threads) schedule(guided)
    for (int b = 0; b < blocks; b++) matmul_block(&r, w, W_F16, y, N, b, NULL);
}

/* Long products (more than INT8_ROWS rows: prompts) of block-format weights: a task takes up
 * to WIDE_BLOCKS blocks of NB outputs, de-quantizes all their weight rows into one panel (in
 * L2) and runs every row group over them, so each row group of x is read once per panel
 * instead of once per PANEL_ROWS outputs (x itself no longer fits in L2 for a prompt). */
#define WIDE_BLOCKS 4

/* y [M, N]: the outputs `keep` does not want (keep[n] == 0) set to -inf, where the product
 * computed every output (the int8 path skips them instead) */
static void unwanted_outputs(float *y, int M, int N, const uint8_t *keep) {
    if (!keep) return;
    for (int n = 0; n < N; n++)
        if (!keep[n])
            for (int m = 0; m < M; m++) y[(int64_t)m * N + n] = -INFINITY;
}

/* task t of `weights_matmul`: outputs [t * per * NB, (t + 1) * per * NB) for every row */
static void wide_task(const float *x, const void *w, int f, float *y, int M, int N, int K, int t, int per,
                      float *panel) {
    int n0 = t * per * NB, n1 = n0 + per * NB < N ? n0 + per * NB : N;
    dequantize_rows(w, f, K, n0, n1, panel);
    int groups = (M + 5) / 6;
    for (int g = 0, m0 = 0; g < groups; g++) {
        int mt = (M - m0) / (groups - g);
        for (int b0 = n0; b0 < n1; b0 += NB)
            rows_block(x, panel, n0, y, N, K, m0, mt, b0, b0 + NB < n1 ? b0 + NB : n1, 1);
        m0 += mt;
    }
}

/* x: [M, K] float32, w: [N, K] in format f (F16/F32/BF16: K a multiple of 8; a block format:
 * rows of whole blocks), y: [M, N] float32. 0 when the scratch buffers could not be allocated
 * (nothing computed), 1 otherwise. How the outputs are split into tasks changes no output's
 * arithmetic. */
int weights_matmul(const float *x, const void *w, int f, float *y, int M, int N, int K, int threads,
                   const uint8_t *keep) {
    int blocks = blocks_of(N);
    if (f == W_F16) {
        half_matmul(x, w, y, M, N, K, threads);
        unwanted_outputs(y, M, N, keep);
        return 1;
    }
    if (int8_path(f, M)) {
        int kq = is_kquant(f);
        uint8_t *acts = malloc((size_t)(kq ? M * KACT_BYTES(K) : M * ACT_BYTES(K)));
        if (!acts) return 0;
        if (kq) quantize_rows_k(x, M, K, acts);
        else quantize_rows(x, M, K, acts);
        Rows r = {x, kq ? NULL : acts, M, K, kq ? acts : NULL, keep};
#pragma omp parallel for num_threads(threads) schedule(guided)
        for (int b = 0; b < blocks; b++) matmul_block(&r, w, f, y, N, b, NULL);
        free(acts);
        return 1;
    }
    if (f == W_F32) {
        Rows r = {x, NULL, M, K};
#pragma omp parallel for num_threads(threads) schedule(guided)
        for (int b = 0; b < blocks; b++) matmul_block(&r, w, f, y, N, b, NULL);
        unwanted_outputs(y, M, N, keep);
        return 1;
    }
    int per = M > INT8_ROWS ? WIDE_BLOCKS : 1; /* blocks of NB outputs per task */
    while (per > 1 && (blocks + per - 1) / per < 2 * threads) per /= 2; /* keep every thread busy */
    int tasks = (blocks + per - 1) / per;
    int64_t panel_floats = (int64_t)per * NB * K;
    float *panels = malloc(sizeof(float) * (size_t)threads * panel_floats);
    if (!panels) return 0;
    Rows r = {x, NULL, M, K};
#pragma omp parallel for num_threads(threads) schedule(guided)
    for (int t = 0; t < tasks; t++) {
        float *panel = panels + omp_get_thread_num() * panel_floats;
        if (per == 1) matmul_block(&r, w, f, y, N, t, panel);
        else wide_task(x, w, f, y, M, N, K, t, per, panel);
    }
    free(panels);
    unwanted_outputs(y, M, N, keep);
    return 1;
}

/* Rows of w [N, K] in format f as float32 into out [n, K]: row ids[i] (ids NULL: rows 0 .. n-1),
 * exactly gguf's values (block_formats.h). */
void dequantize_matrix(const uint8_t *w, int f, int K, const int64_t *ids, int64_t n, float *out, int threads) {
    int64_t rb = row_bytes(f, K);
#pragma omp parallel for num_threads(threads) schedule(guided) if (n * K > 65536)
    for (int64_t i = 0; i < n; i++)
        dequantize_row(w + (ids ? ids[i] : i) * rb, f, K, out + i * K);
}

/* Rows of x [M, K] as the int8 path quantizes them (int8_products.h's layout, ACT_BYTES(K) bytes
 * a row): for the tests. */
void quantize_activations(const float *x, int M, int K, uint8_t *out) { quantize_rows(x, M, K, out); }

/* Rows of x [M, K] (K a multiple of 256) as the K-quant products quantize them (kquant_products.h's
 * layout, KACT_BYTES(K) bytes a row): for the tests. */
void quantize_activations_k(const float *x, int M, int K, uint8_t *out) { quantize_rows_k(x, M, K, out); }

/* The KV cache holds float32 or float16 rows (`half`: a constant at every call, so each
 * attention function below is compiled once per element type). A float16 element is converted
 * exactly to float32 when read, so the arithmetic after the load is the same for both; only
 * the values differ (rounded to float16 when written). */
/* 8 elements of a key or value row from element `at` of `base`, as float32 */
/* element `at` of a cache buffer of float16 (`half`) or float32 elements */
ALWAYS_INLINE const void *element_at(const void *base, int64_t at, const int half) {
    return half ? (const void *)((const uint16_t *)base + at) : (const void *)((const float *)base + at);
}

ALWAYS_INLINE v8 load8(const void *base, int64_t at, const int half) {
    if (half) return v8_load_half((const uint16_t *)base + at);
    return v8_load((const float *)base + at);
}

/* n (a multiple of 8) floats into a cache row: copied, or rounded to the nearest float16 */
static inline void store_row(void *base, int64_t at, const float *src, int n, int half) {
    if (!half) {
        memcpy((float *)base + at, src, sizeof(float) * n);
        return;
    }
    uint16_t *dst = (uint16_t *)base + at;
    for (int d = 0; d < n; d += 8) v8_store_half(dst + d, v8_load(src + d));
}

/* q . k * scale over D dims: 8-wide FMAs in dimension order, then the lanes' tree sum
 * (`v8_tree_sum`); every path computes a score in this order */
ALWAYS_INLINE float key_score(const float *q, const void *k, int64_t k0, int D, float scale, const int half) {
    v8 acc = v8_zero();
    for (int d = 0; d < D; d += 8) acc = v8_fma(v8_load(q + d), load8(k, k0 + d, half), acc);
    return v8_tree_sum(acc) * scale;
}

/* The scores s[0 .. limit) become their exponentials minus the max (padded to a multiple of 8
 * with zeros); returns 1 / their sum. */
static inline float softmax_row(float *s, int limit) {
    float m = -INFINITY;
    for (int j = 0; j < limit; j++)
        if (s[j] > m) m = s[j];
    int padded = (limit + 7) & ~7;
    for (int j = limit; j < padded; j++) s[j] = -INFINITY;
    v8 mv = v8_set1(m), total = v8_zero();
    for (int j = 0; j < padded; j += 8) {
        v8 e = v8_exp_neg(v8_sub(v8_load(s + j), mv));
        v8_store(s + j, e);
        total = v8_add(total, e);
    }
    return 1.0f / v8_hsum(total);
}

/* One (head, query row) pair: softmax(q . k_j * scale) over keys j < limit, times the values;
 * `s` holds limit + 8 floats of scratch. Everything in key order, the same whatever else runs. */
ALWAYS_INLINE void attend_one(const float *qv, const void *kh, const void *vh, int limit, int D,
                              float scale, float *s, float *o, const int half) {
    int j = 0;
    for (; j + 4 <= limit; j += 4) { /* four keys at a time, each summed as alone */
        v8 a0 = v8_zero(), a1 = a0, a2 = a0, a3 = a0;
        int64_t k0 = (int64_t)j * D;
        for (int d = 0; d < D; d += 8) {
            v8 x = v8_load(qv + d);
            a0 = v8_fma(x, load8(kh, k0 + d, half), a0);
            a1 = v8_fma(x, load8(kh, k0 + D + d, half), a1);
            a2 = v8_fma(x, load8(kh, k0 + 2 * D + d, half), a2);
            a3 = v8_fma(x, load8(kh, k0 + 3 * D + d, half), a3);
        }
        v8_tree_sums4(a0, a1, a2, a3, scale, s + j);
    }
    for (; j < limit; j++) s[j] = key_score(qv, kh, (int64_t)j * D, D, scale, half);
    float inv = softmax_row(s, limit);
    for (int d0 = 0; d0 < D; d0 += 32) { /* 4 accumulators of 8 dims at a time */
        int width = D - d0 < 32 ? D - d0 : 32;
        v8 a[4] = {v8_zero(), v8_zero(), v8_zero(), v8_zero()};
        for (j = 0; j < limit; j++) {
            v8 p = v8_set1(s[j]);
            int64_t vr = (int64_t)j * D + d0;
            for (int c = 0; c < width / 8; c++) a[c] = v8_fma(p, load8(vh, vr + 8 * c, half), a[c]);
        }
        for (int c = 0; c < width / 8; c++)
            v8_store(o + d0 + 8 * c, v8_mul(a[c], v8_set1(inv)));
    }
}

#define ROWS 4 /* query rows of a head that attend_rows takes together */

/* attend_rows' weighted values for dims d0 .. d0 + 8 * vecs of its R rows (row r's weights at
 * s + r * stride, over keys 0 .. limit + r - 1); `vecs` a constant at each call, so the loops
 * unroll */
ALWAYS_INLINE void weighted_values(const float *s, int64_t stride, const float *inv, const void *vh, int limit,
                                   int R, int D, int d0, float *o, int64_t o_row, const int vecs, const int half,
                                   const int causal) {
    v8 a[ROWS][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < vecs; c++) a[r][c] = v8_zero();
    for (int j = 0; j < limit; j++) { /* the keys all rows see: each value row read once */
        int64_t vr = (int64_t)j * D + d0;
        v8 v[2];
        for (int c = 0; c < vecs; c++) v[c] = load8(vh, vr + 8 * c, half);
        for (int r = 0; r < R; r++) {
            v8 p = v8_set1(s[r * stride + j]);
            for (int c = 0; c < vecs; c++) a[r][c] = v8_fma(p, v[c], a[r][c]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int j = limit; j < limit + causal * r; j++) { /* the keys only this row sees */
            int64_t vr = (int64_t)j * D + d0;
            v8 p = v8_set1(s[r * stride + j]);
            for (int c = 0; c < vecs; c++) a[r][c] = v8_fma(p, load8(vh, vr + 8 * c, half), a[r][c]);
        }
        v8 iv = v8_set1(inv[r]);
        for (int c = 0; c < vecs; c++) v8_store(o + r * o_row + d0 + 8 * c, v8_mul(a[r][c], iv));
    }
}

/* R (<= ROWS) queries over the same keys and values: consecutive query rows of one head
 * (`causal` 1: row r sees keys 0 .. limit + r - 1), or one row of R query heads that share a key
 * head (`causal` 0: each sees keys 0 .. limit - 1); query r at q + r * q_row, its output at
 * o + r * o_row. The same arithmetic per (query, key) and per output element as `attend_one` (so
 * the same bits), but each key and value row is read (and, from a float16 cache, converted) once
 * for the R queries instead of once per query. `s`: R * (limit + R + 7) floats of scratch. */
ALWAYS_INLINE void attend_rows(const float *q, int64_t q_row, const void *kh, const void *vh, int limit,
                               int R, int D, float scale, float *s, float *o, int64_t o_row, const int half,
                               const int causal) {
    int64_t stride = limit + R + 7;
    int j = 0;
    for (; j + 2 <= limit; j += 2) { /* the keys all R rows see: two keys at a time */
        int64_t k0 = (int64_t)j * D, k1 = k0 + D;
        v8 a[ROWS][2];
        for (int r = 0; r < R; r++) a[r][0] = a[r][1] = v8_zero();
        for (int d = 0; d < D; d += 8) {
            v8 x0 = load8(kh, k0 + d, half), x1 = load8(kh, k1 + d, half);
            for (int r = 0; r < R; r++) {
                v8 qv = v8_load(q + r * q_row + d);
                a[r][0] = v8_fma(qv, x0, a[r][0]);
                a[r][1] = v8_fma(qv, x1, a[r][1]);
            }
        }
        for (int r = 0; r < R; r++) v8_tree_sums2(a[r][0], a[r][1], scale, s + r * stride + j);
    }
    for (int r = 0; r < R; r++) /* the rest, row by row */
        for (int jj = j; jj < limit + causal * r; jj++)
            s[r * stride + jj] = key_score(q + r * q_row, kh, (int64_t)jj * D, D, scale, half);
    float inv[ROWS];
    for (int r = 0; r < R; r++) inv[r] = softmax_row(s + r * stride, limit + causal * r);
    for (int d0 = 0; d0 < D; d0 += 16) /* 16 dims of every row at a time (8 at the end) */
        if (D - d0 >= 16)
            weighted_values(s, stride, inv, vh, limit, R, D, d0, o, o_row, 2, half, causal);
        else
            weighted_values(s, stride, inv, vh, limit, R, D, d0, o, o_row, 1, half, causal);
}

/* attend_rows compiled for each R (a constant in each copy: its accumulators a[r] stay in
 * registers; with R read at run time they went through the stack at every multiply-add) */
static void attend_rows_of(const float *q, int64_t q_row, const void *kh, const void *vh, int limit, int R, int D,
                           float scale, float *s, float *o, int64_t o_row, int half, int causal) {
#define ATTEND_ROWS_CASE(n)                                                                     \
    case n:                                                                                     \
        if (half)                                                                               \
            attend_rows(q, q_row, kh, vh, limit, n, D, scale, s, o, o_row, 1, causal);          \
        else                                                                                    \
            attend_rows(q, q_row, kh, vh, limit, n, D, scale, s, o, o_row, 0, causal);          \
        break;
    switch (R) {
    ATTEND_ROWS_CASE(1)
    ATTEND_ROWS_CASE(2)
    ATTEND_ROWS_CASE(3)
    default: ATTEND_ROWS_CASE(4)
    }
#undef ATTEND_ROWS_CASE
}

/* Causal attention of Q query rows over L cached positions (row i is position L - Q + i and
 * sees keys 0 .. L - Q + i). Query (h, i) at q + h * q_head + i * q_row; key/value row j of
 * head g at base + g * head_stride + j * D; output (i, h) at out + (i * H + h) * D.
 * One row (a decoding step): one task per part of a key head's group of query heads
 * (`head_parts`), the part's heads together (`attend_rows`, not causal; a part of one head:
 * `attend_one`): SmolLM2's 3 heads a key head, Qwen2.5-Coder's 7, StarCoder2's 12.
 * Several rows (a verification pass, a prompt's chunk): one task per head and chunk of up to
 * ROWS consecutive rows (`attend_rows`, causal), the key and value
 * rows read once for the chunk's rows. (A task per part of a key head's queries over one read
 * of its cache, blocks of keys converted to float32 in L1, was faster while `attend_rows` spilled
 * its accumulators, and slower once it did not: SmolLM2's 24-row chunk after 2,000 positions
 * 32.2 against 28.4 ms for 30 layers.) Every way computes each (query, key) and each output
 * element alike, so a pass gives each row the bits of a single step. */
static inline int attention_chunks(int Q) { return (Q + ROWS - 1) / ROWS; }

/* the parts each key head's group of query heads is split into, for one row: the fewest of at
 * most ROWS heads that make the tasks a multiple of the threads where the group allows
 * (SmolLM2's 3 key heads of 3 on 2 threads: parts of 2 and 1 heads, 6 tasks). (When
 * `attend_rows` read its number of queries at run time, a part of fewer than 3 heads was no
 * faster than its heads alone, and each head was a task: 9 reads of the keys and values.) */
static inline int head_parts(int H, int Hkv, int threads) {
    int group = H / Hkv, parts = (group + ROWS - 1) / ROWS;
    while (parts < group && (Hkv * parts) % threads) parts++;
    return parts;
}

/* the tasks of an attention of Q rows */
static inline int attention_tasks(int H, int Hkv, int Q, int threads) {
    return Q == 1 ? Hkv * head_parts(H, Hkv, threads) : H * attention_chunks(Q);
}

/* the floats of scratch one task needs (`attend_one`, `attend_rows`: at most ROWS queries) */
static inline int64_t attention_task_floats(int L) { return (int64_t)ROWS * (L + ROWS + 8); }

/* task t of `attention`; `scratch` holds every task's (`attention_task_floats` each).
 * `window` (0: none): a row at position p attends to the keys at positions p - window + 1 .. p
 * only (Gemma 3's sliding-window layers); where it cuts keys off, each query of the task is
 * computed alone by `attend_one` over its own keys: the arithmetic a single step gives it. */
ALWAYS_INLINE void attention_task_of(int t, const float *q, int64_t q_head, int64_t q_row, const void *k,
                                     const void *v, float *out, int H, int Hkv, int Q, int L, int D,
                                     int64_t k_head_stride, int64_t v_head_stride, float scale, float *scratch,
                                     int window, int threads, const int half) {
    int group = H / Hkv;
    float *s = scratch + (int64_t)t * attention_task_floats(L);
    if (Q == 1) { /* part t % parts of key head t / parts's query heads, as even as can be */
        int parts = head_parts(H, Hkv, threads), g = t / parts, part = t % parts;
        int h0 = g * group + part * group / parts, h1 = g * group + (part + 1) * group / parts;
        int start = window > 0 && L > window ? L - window : 0;
        const void *ks = element_at(k, g * k_head_stride + (int64_t)start * D, half);
        const void *vs = element_at(v, g * v_head_stride + (int64_t)start * D, half);
        if (h1 - h0 == 1)
            attend_one(q + h0 * q_head, ks, vs, L - start, D, scale, s, out + (int64_t)h0 * D, half);
        else
            attend_rows_of(q + h0 * q_head, q_head, ks, vs, L - start, h1 - h0, D, scale, s, out + (int64_t)h0 * D,
                           D, half, 0);
        return;
    }
    int chunks = attention_chunks(Q), h = t / chunks, c = t % chunks; /* head h, its chunk c of rows */
    int r0 = c * Q / chunks, r1 = (c + 1) * Q / chunks; /* as even as can be */
    int64_t kv_at = (int64_t)(h / group);
    const void *kh = element_at(k, kv_at * k_head_stride, half), *vh = element_at(v, kv_at * v_head_stride, half);
    if (window > 0 && L > window) {
        for (int r = r0; r < r1; r++) {
            int limit = L - Q + r + 1, start = limit > window ? limit - window : 0;
            int64_t at = (int64_t)start * D;
            attend_one(q + h * q_head + r * q_row, element_at(kh, at, half), element_at(vh, at, half), limit - start,
                       D, scale, s, out + ((int64_t)r * H + h) * D, half);
        }
    } else
        attend_rows_of(q + h * q_head + r0 * q_row, q_row, kh, vh, L - Q + r0 + 1, r1 - r0, D, scale, s,
                       out + ((int64_t)r0 * H + h) * D, (int64_t)H * D, half, 1);
}

/* the task compiled for each element type of the cache */
static void attention_task(int t, const float *q, int64_t q_head, int64_t q_row, const void *k, const void *v,
                           float *out, int H, int Hkv, int Q, int L, int D, int64_t k_head_stride,
                           int64_t v_head_stride, float scale, float *scratch, int window, int threads, int half) {
    if (half)
        attention_task_of(t, q, q_head, q_row, k, v, out, H, Hkv, Q, L, D, k_head_stride, v_head_stride, scale,
                          scratch, window, threads, 1);
    else
        attention_task_of(t, q, q_head, q_row, k, v, out, H, Hkv, Q, L, D, k_head_stride, v_head_stride, scale,
                          scratch, window, threads, 0);
}

/* q: [H, Q, D] contiguous; k, v: key/value rows of D elements (float32, or float16 where `half`),
 * head h's row j at base + (h / (H / Hkv)) * head_stride + j * D; out: [Q, H, D]. D a multiple of 8. */
void row_attention(const float *q, const void *k, const void *v, float *out,
                   int H, int Hkv, int Q, int L, int D, int64_t k_head_stride,
                   int64_t v_head_stride, float scale, int half, int threads) {
    int tasks = attention_tasks(H, Hkv, Q, threads);
    float *scratch = malloc(sizeof(float) * tasks * attention_task_floats(L));
#pragma omp parallel for num_threads(threads) schedule(guided)
    for (int t = 0; t < tasks; t++)
        attention_task(t, q, (int64_t)Q * D, D, k, v, out, H, Hkv, Q, L, D, k_head_stride, v_head_stride, scale,
                       scratch, 0, threads, half);
    free(scratch);
}

/* ---------------------------------------------------------------- a whole decoder layer
 * A decoder layer of any of the families `lsp_server/model/architectures.py` describes, for a
 * few rows (decoding steps, verification passes), in one call instead of ~40 PyTorch
 * operations: on this CPU the operations' own overhead was ~40% of a step. The arithmetic of
 * `cpu_decoder.CpuDecoderLayer` (its module doc): the input norm (RMS, or LayerNorm with a
 * bias), the q/k/v products (+ biases), per-head RMS norms of q and k (Gemma 3), the rotary
 * embedding (rotating halves, or adjacent pairs) from the layer's table of cos/sin, grouped-
 * query attention over the cache within the layer's window, the o product (+ bias, and an RMS
 * norm before the residual add: Gemma 3), the MLP (SiLU- or GELU-gated, or GELU of up + bias:
 * StarCoder2) with its own norms; float32 except the weights' storage (any format of
 * block_formats.h, one per projection) and the products' (`matmul_block`'s: the int8 path for
 * quantized weights, each thread quantizing the rows of a product's input itself); each row
 * computed alone, so any number of rows gives the same bits, and each product the bits that
 * `weights_matmul` gives for the same rows. */

/* A layer's tensors, LAYER_TENSORS pointers in this order (NULL where the layer has none: the
 * norms' biases but for LayerNorm, the projections' biases, q/k norms, the norms after the
 * attention and the MLP, the gate for a plain MLP), and its LAYER_INTS integers. */
enum { T_ATTN_NORM, T_ATTN_NORM_B, T_FFN_NORM, T_FFN_NORM_B, T_WQ, T_WK, T_WV, T_WO, T_WG, T_WU, T_WD,
       T_BQ, T_BK, T_BV, T_BO, T_BU, T_BD, T_Q_NORM, T_K_NORM, T_ATTN_POST, T_FFN_POST, LAYER_TENSORS };
enum { I_FQ, I_FK, I_FV, I_FO, I_FG, I_FU, I_FD, I_WINDOW, I_TABLE, LAYER_INTS };
/* what the model's layers share: the norm's kind, the MLP's, the rotary's (architectures.py's
 * `Norm`, `FeedForward`, `Rotary`) */
enum { NORM_RMS = 0, NORM_LAYER = 1 };
enum { FFN_SILU_GATED = 0, FFN_GELU_GATED = 1, FFN_GELU = 2 };
enum { ROTARY_HALVES = 0, ROTARY_PAIRS = 1 };

static void rms_norm(const float *x, const float *w, float eps, float *out, int Q, int E) {
    for (int i = 0; i < Q; i++) {
        const float *r = x + (int64_t)i * E;
        float ss = 0.0f;
        for (int e = 0; e < E; e++) ss += r[e] * r[e];
        float inv = 1.0f / sqrtf(ss / E + eps);
        for (int e = 0; e < E; e++) out[(int64_t)i * E + e] = w[e] * (r[e] * inv);
    }
}

/* (x - mean) / sqrt(var + eps) * w + b per row, mean and variance in float32 in order */
static void layer_norm(const float *x, const float *w, const float *b, float eps, float *out, int Q, int E) {
    for (int i = 0; i < Q; i++) {
        const float *r = x + (int64_t)i * E;
        float mean = 0.0f, var = 0.0f;
        for (int e = 0; e < E; e++) mean += r[e];
        mean /= E;
        for (int e = 0; e < E; e++) var += (r[e] - mean) * (r[e] - mean);
        float inv = 1.0f / sqrtf(var / E + eps);
        for (int e = 0; e < E; e++) out[(int64_t)i * E + e] = (r[e] - mean) * inv * w[e] + b[e];
    }
}

static void norm_rows(int kind, const float *x, const float *w, const float *b, float eps, float *out, int Q, int E) {
    if (kind == NORM_LAYER) layer_norm(x, w, b, eps, out, Q, E);
    else rms_norm(x, w, eps, out, Q, E);
}

/* the rotary embedding of one head's D dims `r` in place, with this row's cos/sin (each angle
 * given for both dims it rotates): dims (d, d + D/2), or (2i, 2i + 1); each product rounded
 * before the sum, as PyTorch's `x * cos + rotate_half(x) * sin` rounds (no fused multiply-add) */
__attribute__((optimize("fp-contract=off"))) static void rotate_head(float *r, int D, const float *c, const float *sn, int style) {
    if (style == ROTARY_PAIRS) {
        for (int d = 0; d < D; d += 2) {
            float a = r[d], b = r[d + 1];
            r[d] = a * c[d] - b * sn[d];
            r[d + 1] = b * c[d + 1] + a * sn[d + 1];
        }
        return;
    }
    int half = D / 2;
    for (int d = 0; d < half; d++) {
        float a = r[d], b = r[d + half];
        r[d] = a * c[d] - b * sn[d];
        r[d + half] = b * c[d + half] + a * sn[d + half];
    }
}

/* The MLP's activation of the n values at x into out (x may be out), times the n at u where u is
 * not NULL: GELU
 * (the tanh approximation, PyTorch's and llama.cpp's: 0.5 x (1 + tanh(c (x + 0.044715 x^3))),
 * computed as x / (1 + e^(-2 c (x + 0.044715 x^3))), the same function) or SiLU (x / (1 + e^-x)),
 * 8 values at a time (`v8_times_logistic`, a fixed polynomial: within a few float32 ulps of
 * libm's tanhf / expf, and ~10x faster; the last values of a block through a padded vector, so
 * every value gets the same operations wherever it is). */
static void activate(float *out, const float *x, const float *u, int n, int gelu) {
    for (int e = 0; e < n; e += 8) {
        int m = n - e < 8 ? n - e : 8;
        float in[8] = {0}, up[8] = {0};
        memcpy(in, x + e, sizeof(float) * m);
        if (u) memcpy(up, u + e, sizeof(float) * m);
        v8 xv = v8_load(in), y = xv;
        if (gelu) /* 2 c (x + 0.044715 x x x) */
            y = v8_mul(v8_set1(2.0f * 0.7978845608028654f),
                       v8_add(xv, v8_mul(v8_mul(v8_mul(v8_set1(0.044715f), xv), xv), xv)));
        v8 a = v8_times_logistic(xv, y);
        if (u) a = v8_mul(a, v8_load(up));
        v8_store(in, a);
        memcpy(out + e, in, sizeof(float) * m);
    }
}

/* What the layers of one pass share: sizes, kinds, the rows' rotary tables (`tables` of them,
 * [table][Q][D]), the positions, and the scratch buffers every layer reuses (`pass_buffers`). */
typedef struct {
    int Q, E, H, Hkv, D, F, past, half, threads;
    float eps, scale;
    int norm, ffn, rotary;
    const float *cos, *sin;
    float *xn, *q, *k, *v, *att, *o, *g, *u, *scratch;
    float *panels; /* NB rows of the widest product's K per thread, for block-format weights */
    uint8_t *acts; /* per thread: the rows of a product's input quantized for the int8 path
                    * (ACT_BYTES a row), then for the K-quant products (KACT_BYTES a row) */
    int panel_k;
} Pass;

static int pass_buffers(Pass *p) {
    int Q = p->Q, QD = p->H * p->D, KD = p->Hkv * p->D;
    p->xn = malloc(sizeof(float) * p->threads * Q * p->E); p->q = malloc(sizeof(float) * Q * QD);
    p->k = malloc(sizeof(float) * Q * KD); p->v = malloc(sizeof(float) * Q * KD);
    p->att = malloc(sizeof(float) * Q * QD); p->o = malloc(sizeof(float) * Q * p->E);
    p->g = malloc(sizeof(float) * Q * p->F); p->u = malloc(sizeof(float) * Q * p->F);
    p->scratch = malloc(sizeof(float) * attention_tasks(p->H, p->Hkv, Q, p->threads) *
                        attention_task_floats(p->past + Q));
    p->panel_k = p->E > QD ? p->E : QD;
    if (p->F > p->panel_k) p->panel_k = p->F;
    p->panels = malloc(sizeof(float) * (size_t)p->threads * NB * p->panel_k);
    p->acts = malloc((size_t)(p->threads * Q * (ACT_BYTES(p->panel_k) + KACT_BYTES(p->panel_k))));
    return p->xn && p->q && p->k && p->v && p->att && p->o && p->g && p->u && p->scratch && p->panels && p->acts;
}

static void free_pass(Pass *p) {
    free(p->xn); free(p->q); free(p->k); free(p->v); free(p->att); free(p->o); free(p->g); free(p->u);
    free(p->scratch); free(p->panels); free(p->acts);
}

/* the rows of a product's input x [Q, K], quantized into this thread's buffer where one of the
 * products (formats f1, f2, f3) takes the int8 path */
static Rows product_rows(const Pass *p, const float *x, int K, int f1, int f2, int f3) {
    uint8_t *acts = p->acts + (int64_t)omp_get_thread_num() * p->Q * (ACT_BYTES(p->panel_k) + KACT_BYTES(p->panel_k));
    uint8_t *kacts = acts + (int64_t)p->Q * ACT_BYTES(p->panel_k);
    Rows r = {x, NULL, p->Q, K, NULL};
    const int f[3] = {f1, f2, f3};
    int legacy = 0, kq = 0;
    for (int j = 0; j < 3; j++)
        if (int8_path(f[j], p->Q)) {
            if (is_kquant(f[j])) kq = 1;
            else legacy = 1;
        }
    if (legacy) {
        quantize_rows(x, p->Q, K, acts);
        r.acts = acts;
    }
    if (kq) {
        quantize_rows_k(x, p->Q, K, kacts);
        r.kacts = kacts;
    }
    return r;
}

/* outputs [n0, n1) of rows 0..Q-1 of y [Q, N] plus the bias b (none: NULL) */
static inline void add_bias(float *y, const float *b, int Q, int N, int n0, int n1) {
    if (!b) return;
    for (int i = 0; i < Q; i++)
        for (int e = n0; e < n1; e++) y[(int64_t)i * N + e] += b[e];
}

/* block b of a product that feeds the residual stream: o = x @ w.T (+ bias) there, then h += o there */
static void residual_block(const Rows *x, const void *w, int format, const float *bias, float *o, float *h, int Q,
                           int E, int b, float *panel) {
    matmul_block(x, w, format, o, E, b, panel);
    int n0 = b * NB, n1 = n0 + NB < E ? n0 + NB : E;
    add_bias(o, bias, Q, E, n0, n1);
    for (int i = 0; i < Q; i++)
        for (int e = n0; e < n1; e++) h[(int64_t)i * E + e] += o[(int64_t)i * E + e];
}

/* A product whose output is normed before it joins the residual stream (Gemma 3's norms after
 * the attention and after the MLP): o = x @ w.T (+ bias) in the loop, then, after its barrier,
 * h += rms(o) row by row (a row's norm needs its whole row) */
static void normed_residual(const Rows *x, const void *w, int format, const float *bias, const float *norm_w,
                            float eps, float *o, float *h, int Q, int E, float *panel) {
    int be = blocks_of(E);
#pragma omp for schedule(guided)
    for (int b = 0; b < be; b++) {
        matmul_block(x, w, format, o, E, b, panel);
        int n0 = b * NB, n1 = n0 + NB < E ? n0 + NB : E;
        add_bias(o, bias, Q, E, n0, n1);
    }
#pragma omp for schedule(guided)
    for (int i = 0; i < Q; i++) {
        float *r = o + (int64_t)i * E;
        rms_norm(r, norm_w, eps, r, 1, E);
        for (int e = 0; e < E; e++) h[(int64_t)i * E + e] += r[e];
    }
}

/* Head `hh` of q (kind 0), k (1) or v (2), its products done, in `out` [Q, heads, D]: q and k
 * normed (where the layer has q/k norms) and rotated; k and v written into the cache at the
 * pass's positions. */
static void finish_head(const Pass *p, int kind, int hh, float *out, const float *q_norm, const float *k_norm,
                        const float *cos, const float *sin, void *kbuf, void *vbuf, int64_t head_stride) {
    int D = p->D, heads = kind == 0 ? p->H : p->Hkv;
    const float *nm = kind == 0 ? q_norm : k_norm;
    for (int i = 0; i < p->Q; i++) {
        float *r = out + ((int64_t)i * heads + hh) * D;
        if (kind < 2) {
            if (nm) rms_norm(r, nm, p->eps, r, 1, D);
            rotate_head(r, D, cos + (int64_t)i * D, sin + (int64_t)i * D, p->rotary);
        }
        if (kind > 0) store_row(kind == 1 ? kbuf : vbuf, hh * head_stride + (int64_t)(p->past + i) * D, r, D, p->half);
    }
}

/* One decoder layer, run by every thread of the enclosing parallel region (its `single` and
 * `for` constructs bind to it): `w` the layer's LAYER_TENSORS tensors, `ints` its LAYER_INTS
 * (the projections' formats, its window, its rotary table); its keys and values at kbuf/vbuf,
 * head g's row j at g * head_stride + j * D elements (float16 where p->half). Before each
 * product's loop every thread quantizes that product's input rows into its own buffer (where
 * the int8 path applies: a few thousand operations, no barrier), and every thread computes the
 * norms itself into its own buffer: a few thousand operations instead of a barrier where the
 * others wait (each wait is a futex sleep and wake-up under OMP_WAIT_POLICY=PASSIVE). The q, k
 * and v products share one loop, as do gate and up (with the activation of each block), and the
 * residual additions are done per block of the product that feeds them where no norm comes
 * between. Every element's arithmetic is the one of the separate operations, so the bits are
 * the same whatever the rows and threads. */
static void layer_in_region(float *h, const Pass *p, const void *const *w, const int *ints, void *kbuf,
                            void *vbuf, int64_t head_stride) {
    int Q = p->Q, E = p->E, H = p->H, Hkv = p->Hkv, D = p->D, F = p->F, QD = H * D, KD = Hkv * D;
    int L = p->past + Q;
    const void *wq = w[T_WQ], *wk = w[T_WK], *wv = w[T_WV], *wo = w[T_WO], *wg = w[T_WG], *wu = w[T_WU],
               *wd = w[T_WD];
    const float *bq = w[T_BQ], *bk = w[T_BK], *bv = w[T_BV], *bo = w[T_BO], *bu = w[T_BU], *bd = w[T_BD];
    const float *q_norm = w[T_Q_NORM], *k_norm = w[T_K_NORM];
    int fq = ints[I_FQ], fk = ints[I_FK], fv = ints[I_FV], fo = ints[I_FO], fg = ints[I_FG], fu = ints[I_FU],
        fd = ints[I_FD], window = ints[I_WINDOW];
    const float *cos = p->cos + (int64_t)ints[I_TABLE] * Q * D, *sin = p->sin + (int64_t)ints[I_TABLE] * Q * D;
    float *panel = p->panels + (int64_t)omp_get_thread_num() * NB * p->panel_k;
    float *xn = p->xn + (int64_t)omp_get_thread_num() * Q * E, *q = p->q, *k = p->k, *v = p->v, *att = p->att, *o = p->o, *g = p->g, *u = p->u;
    int heads_tasks = attention_tasks(H, Hkv, Q, p->threads);
    int be = blocks_of(E), bf = blocks_of(F);
    /* h is complete: the previous layer's last loop ended in a barrier */
    norm_rows(p->norm, h, w[T_ATTN_NORM], w[T_ATTN_NORM_B], p->eps, xn, Q, E);
    Rows rx = product_rows(p, xn, E, fq, fk, fv);
    if (D % (2 * NB) == 0 && p->rotary == ROTARY_HALVES && !q_norm) {
        /* Tasks of 2 * NB outputs of one head, dims [NB j, NB j + NB) and the same plus D / 2:
         * each task also applies the rotary embedding to them (it pairs dim d with d + D / 2)
         * and writes its keys and values into the cache, so no `single` step (and no barrier)
         * between the products and the attention. */
        int per_head = D / (2 * NB), tasks = (H + 2 * Hkv) * per_head;
#pragma omp for schedule(guided)
        for (int t = 0; t < tasks; t++) {
            int head = t / per_head, j = t % per_head, kind = head < H ? 0 : head < H + Hkv ? 1 : 2;
            int hh = kind == 0 ? head : kind == 1 ? head - H : head - H - Hkv;
            const void *wm = kind == 0 ? wq : kind == 1 ? wk : wv;
            const float *bm = kind == 0 ? bq : kind == 1 ? bk : bv;
            int fm = kind == 0 ? fq : kind == 1 ? fk : fv;
            float *out = kind == 0 ? q : kind == 1 ? k : v;
            int N = kind == 0 ? QD : KD, heads = kind == 0 ? H : Hkv, d0 = NB * j, half = D / 2;
            matmul_block(&rx, wm, fm, out, N, (hh * D + d0) / NB, panel);
            matmul_block(&rx, wm, fm, out, N, (hh * D + half + d0) / NB, panel);
            add_bias(out, bm, Q, N, hh * D + d0, hh * D + d0 + NB);
            add_bias(out, bm, Q, N, hh * D + half + d0, hh * D + half + d0 + NB);
            for (int i = 0; i < Q; i++) {
                float *r = out + ((int64_t)i * heads + hh) * D;
                if (kind < 2) { /* as `rotate_head`, for these dims */
                    const float *c = cos + (int64_t)i * D, *sn = sin + (int64_t)i * D;
                    for (int d = d0; d < d0 + NB; d++) {
                        float a = r[d], b = r[d + half];
                        r[d] = a * c[d] - b * sn[d];
                        r[d + half] = b * c[d + half] + a * sn[d + half];
                    }
                }
                if (kind > 0) { /* the new position into the cache */
                    void *buf = kind == 1 ? kbuf : vbuf;
                    int64_t at = hh * head_stride + (int64_t)(p->past + i) * D;
                    store_row(buf, at + d0, r + d0, NB, p->half);
                    store_row(buf, at + half + d0, r + half + d0, NB, p->half);
                }
            }
        }
    } else if (D % NB == 0) {
        /* A task per head (all its D dims): its products (+ biases), its q/k norm, rotary and,
         * for keys and values, the new positions into the cache. */
        int tasks = H + 2 * Hkv, per = D / NB;
#pragma omp for schedule(guided)
        for (int t = 0; t < tasks; t++) {
            int kind = t < H ? 0 : t < H + Hkv ? 1 : 2, hh = kind == 0 ? t : kind == 1 ? t - H : t - H - Hkv;
            const void *wm = kind == 0 ? wq : kind == 1 ? wk : wv;
            const float *bm = kind == 0 ? bq : kind == 1 ? bk : bv;
            int fm = kind == 0 ? fq : kind == 1 ? fk : fv;
            float *out = kind == 0 ? q : kind == 1 ? k : v;
            int N = kind == 0 ? QD : KD;
            for (int j = 0; j < per; j++) matmul_block(&rx, wm, fm, out, N, (hh * D) / NB + j, panel);
            add_bias(out, bm, Q, N, hh * D, hh * D + D);
            finish_head(p, kind, hh, out, q_norm, k_norm, cos, sin, kbuf, vbuf, head_stride);
        }
    } else {
        /* heads smaller than a block of outputs: the products by blocks, then the heads */
        int nq = blocks_of(QD), nk = blocks_of(KD);
#pragma omp for schedule(guided)
        for (int b = 0; b < nq + 2 * nk; b++) {
            int kind = b < nq ? 0 : b < nq + nk ? 1 : 2, bb = kind == 0 ? b : kind == 1 ? b - nq : b - nq - nk;
            int N = kind == 0 ? QD : KD, n0 = bb * NB, n1 = n0 + NB < N ? n0 + NB : N;
            float *out = kind == 0 ? q : kind == 1 ? k : v;
            matmul_block(&rx, kind == 0 ? wq : kind == 1 ? wk : wv, kind == 0 ? fq : kind == 1 ? fk : fv, out, N, bb,
                         panel);
            add_bias(out, kind == 0 ? bq : kind == 1 ? bk : bv, Q, N, n0, n1);
        }
#pragma omp for schedule(guided)
        for (int t = 0; t < H + 2 * Hkv; t++) {
            int kind = t < H ? 0 : t < H + Hkv ? 1 : 2, hh = kind == 0 ? t : kind == 1 ? t - H : t - H - Hkv;
            finish_head(p, kind, hh, kind == 0 ? q : kind == 1 ? k : v, q_norm, k_norm, cos, sin, kbuf, vbuf,
                        head_stride);
        }
    }
#pragma omp for schedule(guided)
    for (int t = 0; t < heads_tasks; t++)
        attention_task(t, q, D, QD, kbuf, vbuf, att, H, Hkv, Q, L, D, head_stride, head_stride, p->scale,
                       p->scratch, window, p->threads, p->half);
    Rows ra = product_rows(p, att, QD, fo, fo, fo); /* att is complete: the attention's loop ended in a barrier */
    if (w[T_ATTN_POST]) {
        normed_residual(&ra, wo, fo, bo, w[T_ATTN_POST], p->eps, o, h, Q, E, panel);
    } else {
#pragma omp for schedule(guided)
        for (int b = 0; b < be; b++) residual_block(&ra, wo, fo, bo, o, h, Q, E, b, panel);
    }
    norm_rows(p->norm, h, w[T_FFN_NORM], w[T_FFN_NORM_B], p->eps, xn, Q, E); /* after the o loop's barrier */
    Rows rp = product_rows(p, xn, E, wg ? fg : fu, fu, fu);
#pragma omp for schedule(guided)
    for (int b = 0; b < bf; b++) {
        int n0 = b * NB, n1 = n0 + NB < F ? n0 + NB : F;
        matmul_block(&rp, wu, fu, u, F, b, panel);
        add_bias(u, bu, Q, F, n0, n1);
        if (p->ffn == FFN_GELU) { /* no gate: gelu(up x + b), into g for the down product */
            for (int i = 0; i < Q; i++) activate(g + (int64_t)i * F + n0, u + (int64_t)i * F + n0, NULL, n1 - n0, 1);
            continue;
        }
        matmul_block(&rp, wg, fg, g, F, b, panel);
        for (int i = 0; i < Q; i++)
            activate(g + (int64_t)i * F + n0, g + (int64_t)i * F + n0, u + (int64_t)i * F + n0, n1 - n0,
                     p->ffn == FFN_GELU_GATED);
    }
    Rows rg = product_rows(p, g, F, fd, fd, fd); /* after the gate and up loop and its barrier */
    if (w[T_FFN_POST]) {
        normed_residual(&rg, wd, fd, bd, w[T_FFN_POST], p->eps, o, h, Q, E, panel);
    } else {
#pragma omp for schedule(guided)
        for (int b = 0; b < be; b++) residual_block(&rg, wd, fd, bd, o, h, Q, E, b, panel);
    }
}

/* `layers` decoder layers in turn over the rows of h [Q, E], in one parallel region (the
 * threads wake once instead of once per product and attention: with OMP_WAIT_POLICY=PASSIVE,
 * lsp_server/threads.py, a waiting thread sleeps and each region wakes it with a futex): layer
 * l's tensors at tensors[LAYER_TENSORS l ...], its integers at ints[LAYER_INTS l ...], its keys
 * at kbase + l * layer_stride and values at vbase + l * layer_stride (elements), head g's row j
 * at g * head_stride + j * D; every layer holds `past` positions and gets the Q new ones.
 * `kinds`: the norm's, the MLP's and the rotary's (the enums above); cos/sin: `tables` tables
 * [Q][D]. One layer (layers 1) is the same arithmetic, so a model run layer by layer gets the
 * same bits. 0 when the scratch buffers could not be allocated (nothing computed), 1 otherwise.
 *
 * Every loop here (and every parallel loop of this file) is scheduled `guided`, not `static`:
 * at each loop's end the thread done first sleeps (PASSIVE) and wakes some 10-50 µs after the
 * last one arrives; a static split kept its share of the next loop waiting for it, ~120 times a
 * step for Gemma 3 270M's 18 layers. Guided, the awake thread takes the first half of the next
 * loop at once and the sleeper joins for what is left (measured against static, one run of
 * alternated kernels: SmolLM2 -1.9 ms a step of ~11, Qwen2.5-Coder 0.5B -2.2 of ~23, Gemma 3
 * 270M -1.3 of ~20). Which thread computes an output changes none of its operations, so the
 * bits are the same. */
int decoder_layers(float *h, int Q, int E, int layers, const void *const *tensors, const int *ints,
                   const int *kinds, float eps, int H, int Hkv, int D, int F, const float *cos, const float *sin,
                   void *kbase, void *vbase, int64_t layer_stride, int64_t head_stride, int past, float scale,
                   int half, int threads) {
    Pass p = {Q, E, H, Hkv, D, F, past, half, threads, eps, scale, kinds[0], kinds[1], kinds[2], cos, sin, 0};
    int ok = pass_buffers(&p);
    if (ok) {
        int64_t bytes = half ? 2 : 4;
#pragma omp parallel num_threads(threads)
        for (int l = 0; l < layers; l++)
            layer_in_region(h, &p, tensors + LAYER_TENSORS * l, ints + LAYER_INTS * l,
                            (char *)kbase + l * layer_stride * bytes, (char *)vbase + l * layer_stride * bytes,
                            head_stride);
    }
    free_pass(&p);
    return ok;
}

int layer_tensors(void) { return LAYER_TENSORS; }
int layer_ints(void) { return LAYER_INTS; }
