/* Short products (at most INT8_ROWS rows) of K-quant weights (Q4_K, Q5_K, Q6_K), llama.cpp's way
 * (ggml-cpu's q8_K): each row quantized once per product in blocks of 256 values, one float
 * scale per block and the sum of every 16 codes, then a weight super-block's integer codes times
 * the row's codes in integers with the 6-bit (Q6_K: 8-bit) sub-block scales applied in integers
 * too, and only two float operations per super-block and row.
 *
 * Why not int8_products.h's units of 32: there each unit of 32 values carries its own float
 * scale of the row, so every 32 values cost a conversion, a multiply and one or two fused adds
 * per lane, and a K-quant super-block's scales had to be turned into 16 floats first. A decoding
 * step read Q4_K / Q6_K weights at 8-9 GB/s that way against 20 for Q8_0 (bench/block_products.py);
 * here (numbers in docs/benchmarks.md) they are integer work: per 64 values one vpmaddubsw and
 * one vpdpwssd (AVX-512; vpmaddwd + vpaddd in AVX2).
 *
 * The rows (`quantize_rows_k`): per block of 256 values a float scale dx = max|x| / 127 and
 * codes a = round(x / dx) in [-127, 127] (ties to even); per 16 values the int16 sum of their
 * codes. A row's bytes: K codes, K / 256 float dx, K / 16 int16 sums (`KACT_BYTES`).
 *
 * A weight super-block: codes c (unsigned: Q4_K 0-15, Q5_K 0-31, Q6_K 0-63), per sub-block an
 * integer scale s (Q4_K/Q5_K: 8 of 32 values, 6-bit; Q6_K: 16 of 16 values, signed 8-bit) and for
 * Q4_K/Q5_K an integer minimum m per 32 values; float16 d (and dmin). Its value is d s c - dmin m
 * (Q6_K: d s (c - 32)). Per super-block b and row, 16 int32 lanes S (lane l < 8: the even units
 * of 32 values, values 4 l .. 4 l + 3 of each; lane 8 + l: the odd units) and 8 lanes O:
 *     S_l = sum over its values of s * c * a                       exact
 *     O_l = sum over the 2 groups of 16 of unit l of w_g * bsum_g  exact (w: Q4_K/Q5_K m, Q6_K s)
 *     Q6_K: S_l -= 32 O_l (l < 8)
 *     acc_l += (float)S_l * (d * dx_b)                  16 lanes, one fused multiply-add each
 *     accm_l += (float)O_l * -(dmin * dx_b)             Q4_K/Q5_K, 8 lanes
 * over the super-blocks in order, then v8_hsum((acc_0..7 + acc_8..15) + accm). Every operation of
 * an output depends only on its row and its weights (never on the other rows or on how the work
 * is split), and the AVX-512, AVX2 and portable builds compute these same integers and float
 * operations (the portable build without a fused multiply-add where its target has none).
 *
 * Accuracy: the row's rounding moves each value by at most dx / 2 = max|x| / 254 of its block of
 * 256 (coarser than int8_products.h's 32, as llama.cpp's), so an output moves by at most the sum
 * over blocks of max|x_b| / 254 * sum |w| over the block (tests/test_block_formats.py holds the
 * kernels to it). */
#ifndef SYNTAXLOCK_KQUANT_PRODUCTS_H
#define SYNTAXLOCK_KQUANT_PRODUCTS_H

#include "block_formats.h"

#define KACT_BYTES(K) ((int64_t)(K) + 4 * ((K) / QKK) + 2 * ((K) / 16)) /* a quantized row's bytes */
#define KROW_D(r, K) ((const float *)((r) + (K)))
#define KROW_BSUMS(r, K) ((const int16_t *)((r) + (K) + 4 * ((K) / QKK)))
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KQ_GROUP 8 /* rows that share one decoding of a weight super-block */
#else
#define KQ_GROUP 4
#endif

/* one block of 256 values: codes, dx, the 16 sums (scalar C: every build; where a value is not
 * finite, the x86 builds too) */
static inline void quantize_superblock(const float *v, int8_t *q, float *dx, int16_t *bsums) {
    float d = quantize_codes(v, QKK, q);
    *dx = d;
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += q[16 * g + j];
        bsums[g] = (int16_t)s;
    }
}

/* rows [0, M) of x [M, K] (K a multiple of 256) into `out` (KACT_BYTES(K) bytes a row). The x86
 * builds take 8 values at a time where a block's values are finite: the same operations (|x| max
 * exact, one division, one reciprocal, round-to-nearest-even conversions). */
static void quantize_rows_k(const float *x, int M, int K, uint8_t *out) {
    int nb = K / QKK;
    for (int i = 0; i < M; i++) {
        const float *r = x + (int64_t)i * K;
        uint8_t *o = out + (int64_t)i * KACT_BYTES(K);
        int8_t *q = (int8_t *)o;
        float *dx = (float *)(o + K);
        int16_t *bsums = (int16_t *)(o + K + 4 * nb);
        for (int b = 0; b < nb; b++) {
            const float *v = r + QKK * b;
            int8_t *qb = q + QKK * b;
            int16_t *bs = bsums + 16 * b;
#ifdef KERNEL_X86
            const __m256 sign = _mm256_set1_ps(-0.0f);
            __m256 m = _mm256_setzero_ps(), ord = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
            for (int j = 0; j < QKK; j += 8) {
                __m256 a = _mm256_loadu_ps(v + j);
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, a));
                ord = _mm256_and_ps(ord, _mm256_cmp_ps(a, a, _CMP_ORD_Q));
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
            float amax = _mm_cvtss_f32(h);
            if (_mm256_movemask_ps(ord) == 0xFF && amax <= 3.4028234663852886e38f) {
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                __m256 vid = _mm256_set1_ps(id);
                for (int j = 0; j < QKK; j += 32) {
                    const float *w = v + j;
                    __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w), vid));
                    __m256i c1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + 8), vid));
                    __m256i c2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + 16), vid));
                    __m256i c3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + 24), vid));
                    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
                    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); /* packs' lane order */
                    p = _mm256_max_epi8(p, _mm256_set1_epi8(-127)); /* [-127, 127], as the scalar code */
                    _mm256_storeu_si256((__m256i *)(qb + j), p);
                    /* sums of 8 of (code + 128), then of 16 */
                    __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
                    int64_t s[4];
                    _mm256_storeu_si256((__m256i *)s, s8);
                    bs[j / 16] = (int16_t)(s[0] + s[1] - 16 * 128);
                    bs[j / 16 + 1] = (int16_t)(s[2] + s[3] - 16 * 128);
                }
                dx[b] = d;
                continue;
            }
#endif
            quantize_superblock(v, qb, dx + b, bs);
        }
    }
}

/* Q4_K/Q5_K's 8 scales and 8 minimums (6 bits each, 12 bytes at s) as bytes: sc[j] in byte j
 * of *sc, m[j] in byte j of *mn (kquant_scale_min's values, 32 bits at a time) */
ALWAYS_INLINE void kquant_scales8(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    uint32_t sc_lo = w0 & 0x3F3F3F3Fu, m_lo = w1 & 0x3F3F3F3Fu;
    uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u); /* (s[j - 4] >> 6) << 4 */
    uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *mn = m_lo | (uint64_t)m_hi << 32;
}

ALWAYS_INLINE int kq_has_min(const int f) { return f == W_Q4_K || f == W_Q5_K; }

/* a super-block's float16 d and dmin (Q6_K: none, 0) and, for Q4_K/Q5_K, its scales and
 * minimums as bytes (kquant_scales8; Q6_K: 0) */
ALWAYS_INLINE void kq_header(const uint8_t *b, const int f, float *d, float *dmin, uint64_t *sc8, uint64_t *mn8) {
    if (f == W_Q6_K) {
        *d = half_at(b + 208);
        *dmin = 0.0f;
        *sc8 = *mn8 = 0;
        return;
    }
    *d = half_at(b);
    *dmin = half_at(b + 2);
    kquant_scales8(b + 4, sc8, mn8);
}

#ifdef KERNEL_X86
/* the 16 int16 weights of O's madd: Q4_K/Q5_K m[g / 2] (each minimum for both its groups of 16),
 * Q6_K the 16 scales */
ALWAYS_INLINE __m256i kq_group_weights(const uint8_t *b, const int f, uint64_t mn) {
    if (f == W_Q6_K) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    __m128i m = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)mn),
                                 _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    return _mm256_cvtepu8_epi16(m);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
typedef __m512i KCodes; /* the codes of units 2c (low half) and 2c + 1 (high half) */
#define KQ_VECTORS 4
#else
typedef __m256i KCodes; /* the codes of unit u */
#define KQ_VECTORS 8
#endif

/* a super-block decoded: its codes, the int16 scales of their maddubs pairs, O's weights, d and dmin */
typedef struct {
    KCodes codes[KQ_VECTORS], scales[KQ_VECTORS];
    __m256i gw;
    float d, dmin;
} KBlock;

/* d, dmin and O's weights into k; Q4_K/Q5_K's scales as bytes (kquant_scales8) */
ALWAYS_INLINE uint64_t kq_head(const uint8_t *b, const int f, KBlock *k) {
    uint64_t sc8, mn8;
    kq_header(b, f, &k->d, &k->dmin, &sc8, &mn8);
    k->gw = kq_group_weights(b, f, mn8);
    return sc8;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
ALWAYS_INLINE void kq_decode(const uint8_t *b, const int f, KBlock *k) {
    uint64_t sc8 = kq_head(b, f, k);
    if (f == W_Q6_K) {
        __m512i sc = _mm512_zextsi256_si512(k->gw);
        for (int p = 0; p < 4; p++) { /* units 2p, 2p + 1 = 4 hh + s, s + 1 (s = 2 (p % 2)) */
            int hh = p / 2, nib = p % 2;
            __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * hh));
            __m512i lo = _mm512_and_si512(_mm512_srl_epi16(ql, _mm_cvtsi32_si128(4 * nib)), _mm512_set1_epi8(0x0F));
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * hh)));
            __m512i shifts = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(4 * nib))),
                                                _mm256_set1_epi16((short)(4 * nib + 2)), 1);
            __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts), _mm512_set1_epi8(3));
            k->codes[p] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
            /* int16 lane i (values 2 i, 2 i + 1 of the pair) under scale 4 p + i / 8 */
            static const int16_t eighths[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
            __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * p)), _mm512_loadu_si512((const void *)eighths));
            k->scales[p] = _mm512_permutexvar_epi16(idx, sc);
        }
        return;
    }
    __m512i sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m512i hb = _mm512_setzero_si512();
    if (f == W_Q5_K) hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + (f == W_Q5_K ? 48 : 16) + 32 * c));
        k->codes[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                         _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
        if (f == W_Q5_K) { /* bit 2c (low half) and 2c + 1 (high half) of the 32 high-bit bytes */
            __m512i sel = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                                             _mm256_set1_epi8((char)(2 << (2 * c))), 1);
            k->codes[c] = _mm512_or_si512(k->codes[c],
                                          _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hb, sel), _mm512_set1_epi8(0x10)));
        }
        __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * c))),
                                         _mm256_set1_epi16((short)(2 * c + 1)), 1);
        k->scales[c] = _mm512_permutexvar_epi16(idx, sc);
    }
}

/* a row's sums over the super-blocks: S's 16 lanes (d dx applied) and O's 8 (-(dmin dx)) */
typedef struct {
    __m512 s;
    __m256 m;
} KAcc;

ALWAYS_INLINE void kq_acc_zero(KAcc *a) {
    a->s = _mm512_setzero_ps();
    a->m = _mm256_setzero_ps();
}

/* one row's product with super-block k: its codes x, its 16 sums bs, its scale dx */
ALWAYS_INLINE void kq_acc_add(KAcc *a, const KBlock *k, const int8_t *x, const int16_t *bs, float dx, const int f) {
    __m512i S = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++) {
        __m512i P = _mm512_maddubs_epi16(k->codes[c], _mm512_loadu_si512((const void *)(x + 64 * c)));
#ifdef __AVX512VNNI__
        S = _mm512_dpwssd_epi32(S, P, k->scales[c]);
#else
        S = _mm512_add_epi32(S, _mm512_madd_epi16(P, k->scales[c]));
#endif
    }
    __m256i O = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), k->gw);
    if (f == W_Q6_K) S = _mm512_sub_epi32(S, _mm512_zextsi256_si512(_mm256_slli_epi32(O, 5)));
    a->s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_set1_ps(k->d * dx), a->s);
    if (kq_has_min(f)) a->m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(O), _mm256_set1_ps(-(k->dmin * dx)), a->m);
}

ALWAYS_INLINE float kq_acc_sum(const KAcc *a, const int f) {
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a->s), 1));
    __m256 t = _mm256_add_ps(_mm512_castps512_ps256(a->s), hi);
    if (kq_has_min(f)) t = _mm256_add_ps(t, a->m);
    return v8_hsum(t);
}
#elif defined(KERNEL_X86)
ALWAYS_INLINE void kq_decode(const uint8_t *b, const int f, KBlock *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    uint64_t sc8 = kq_head(b, f, k);
    if (f == W_Q6_K) {
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int t = 0; t < 8; t++) {
            int hh = t / 4, s = t % 4;
            __m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * hh + 32 * (s & 1)));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * hh));
            __m256i lo = _mm256_and_si256(_mm256_srl_epi16(l, _mm_cvtsi32_si128(4 * (s >> 1))), m4);
            __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
            k->codes[t] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            k->scales[t] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[2 * t])),
                                                   _mm_set1_epi16(sc[2 * t + 1]), 1);
        }
        return;
    }
    __m256i hb = _mm256_setzero_si256();
    if (f == W_Q5_K) hb = _mm256_loadu_si256((const __m256i *)(b + 16));
    for (int j = 0; j < 8; j++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + (f == W_Q5_K ? 48 : 16) + 32 * (j / 2)));
        k->codes[j] = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (j & 1))), m4);
        if (f == W_Q5_K) {
            __m256i h = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
            k->codes[j] = _mm256_or_si256(k->codes[j], _mm256_slli_epi16(h, 4));
        }
        k->scales[j] = _mm256_set1_epi16((short)((sc8 >> (8 * j)) & 0xFF));
    }
}

typedef struct {
    __m256 s[2], m;
} KAcc;

ALWAYS_INLINE void kq_acc_zero(KAcc *a) { a->s[0] = a->s[1] = a->m = _mm256_setzero_ps(); }

ALWAYS_INLINE void kq_acc_add(KAcc *a, const KBlock *k, const int8_t *x, const int16_t *bs, float dx, const int f) {
    __m256i S[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int u = 0; u < 8; u++) {
        __m256i P = _mm256_maddubs_epi16(k->codes[u], _mm256_loadu_si256((const __m256i *)(x + 32 * u)));
        S[u & 1] = _mm256_add_epi32(S[u & 1], _mm256_madd_epi16(P, k->scales[u]));
    }
    __m256i O = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), k->gw);
    if (f == W_Q6_K) S[0] = _mm256_sub_epi32(S[0], _mm256_slli_epi32(O, 5));
    __m256 dd = _mm256_set1_ps(k->d * dx);
    a->s[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[0]), dd, a->s[0]);
    a->s[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[1]), dd, a->s[1]);
    if (kq_has_min(f)) a->m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(O), _mm256_set1_ps(-(k->dmin * dx)), a->m);
}

ALWAYS_INLINE float kq_acc_sum(const KAcc *a, const int f) {
    __m256 t = _mm256_add_ps(a->s[0], a->s[1]);
    if (kq_has_min(f)) t = _mm256_add_ps(t, a->m);
    return v8_hsum(t);
}
#else /* the portable build: the same integers and float operations in plain C */
typedef struct {
    uint8_t codes[QKK];
    int16_t scales[16]; /* per 16 values */
    int16_t gw[16];
    float d, dmin;
} KBlock;

ALWAYS_INLINE void kq_decode(const uint8_t *b, const int f, KBlock *k) {
    uint64_t sc8, mn8;
    kq_header(b, f, &k->d, &k->dmin, &sc8, &mn8);
    if (f == W_Q6_K) {
        for (int t = 0; t < 8; t++) {
            int hh = t / 4, s = t % 4;
            const uint8_t *l = b + 64 * hh + 32 * (s & 1), *hb = b + 128 + 32 * hh;
            for (int i = 0; i < 32; i++)
                k->codes[32 * t + i] = (uint8_t)(((l[i] >> (4 * (s >> 1))) & 0x0F) | (((hb[i] >> (2 * s)) & 3) << 4));
        }
        for (int g = 0; g < 16; g++) k->scales[g] = k->gw[g] = (int8_t)b[192 + g];
        return;
    }
    for (int j = 0; j < 8; j++) {
        const uint8_t *q = b + (f == W_Q5_K ? 48 : 16) + 32 * (j / 2);
        for (int i = 0; i < 32; i++) {
            int code = (q[i] >> (4 * (j & 1))) & 0x0F;
            if (f == W_Q5_K) code |= ((b[16 + i] >> j) & 1) << 4;
            k->codes[32 * j + i] = (uint8_t)code;
        }
        k->scales[2 * j] = k->scales[2 * j + 1] = (int16_t)((sc8 >> (8 * j)) & 0xFF);
        k->gw[2 * j] = k->gw[2 * j + 1] = (int16_t)((mn8 >> (8 * j)) & 0xFF);
    }
}

typedef struct {
    float s[16], m[8];
} KAcc;

ALWAYS_INLINE void kq_acc_zero(KAcc *a) { memset(a, 0, sizeof *a); }

ALWAYS_INLINE void kq_acc_add(KAcc *a, const KBlock *k, const int8_t *x, const int16_t *bs, float dx, const int f) {
    int32_t S[16] = {0}, O[8];
    for (int u = 0; u < 8; u++)
        for (int l = 0; l < 8; l++) {
            int at = 32 * u + 4 * l, I = 0;
            for (int e = 0; e < 4; e++) I += k->codes[at + e] * x[at + e];
            S[8 * (u & 1) + l] += I * k->scales[at / 16];
        }
    for (int l = 0; l < 8; l++) O[l] = bs[2 * l] * k->gw[2 * l] + bs[2 * l + 1] * k->gw[2 * l + 1];
    if (f == W_Q6_K)
        for (int l = 0; l < 8; l++) S[l] -= 32 * O[l];
    float dd = k->d * dx, dm = -(k->dmin * dx);
    for (int l = 0; l < 16; l++) a->s[l] = FMA((float)S[l], dd, a->s[l]);
    if (kq_has_min(f))
        for (int l = 0; l < 8; l++) a->m[l] = FMA((float)O[l], dm, a->m[l]);
}

ALWAYS_INLINE float kq_acc_sum(const KAcc *a, const int f) {
    v8 t = v8_add(v8_load(a->s), v8_load(a->s + 8));
    if (kq_has_min(f)) t = v8_add(t, v8_load(a->m));
    return v8_hsum(t);
}
#endif

/* mt rows (at `acts`, `stride` bytes apart) times one weight row of K / QKK super-blocks, each
 * decoded once for the rows: y[i N] */
ALWAYS_INLINE void kq_rows(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, const int f,
                           const int mt, float *y, int N) {
    KAcc acc[KQ_GROUP];
    for (int i = 0; i < mt; i++) kq_acc_zero(&acc[i]);
    const int bytes = format_bytes(f);
    for (int b = 0; b < K / QKK; b++) {
        KBlock k;
        kq_decode(wrow + (int64_t)b * bytes, f, &k);
        for (int i = 0; i < mt; i++) {
            const uint8_t *r = acts + i * stride;
            kq_acc_add(&acc[i], &k, (const int8_t *)r + QKK * b, KROW_BSUMS(r, K) + 16 * b, KROW_D(r, K)[b], f);
        }
    }
    for (int i = 0; i < mt; i++) y[(int64_t)i * N] = kq_acc_sum(&acc[i], f);
}

/* kq_rows compiled for each K-quant format and group size (constants in each copy) */
ALWAYS_INLINE void kq_rows_of(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, const int f, int mt,
                              float *y, int N) {
    switch (mt) {
    case 1: kq_rows(acts, stride, wrow, K, f, 1, y, N); break;
    case 2: kq_rows(acts, stride, wrow, K, f, 2, y, N); break;
    case 3: kq_rows(acts, stride, wrow, K, f, 3, y, N); break;
#if KQ_GROUP > 4
    case 4: kq_rows(acts, stride, wrow, K, f, 4, y, N); break;
    case 5: kq_rows(acts, stride, wrow, K, f, 5, y, N); break;
    case 6: kq_rows(acts, stride, wrow, K, f, 6, y, N); break;
    case 7: kq_rows(acts, stride, wrow, K, f, 7, y, N); break;
    default: kq_rows(acts, stride, wrow, K, f, 8, y, N); break;
#else
    default: kq_rows(acts, stride, wrow, K, f, 4, y, N); break;
#endif
    }
}

/* outputs [n0, n1) of every row: y[m, n] for the M rows quantized at `kacts` (quantize_rows_k)
 * and K-quant weights `w` [N, K] of format f; rows in groups of up to KQ_GROUP (as even as can
 * be), each weight super-block decoded once per group */
static void kq_block(const uint8_t *kacts, const uint8_t *w, int f, float *y, int M, int N, int K, int n0, int n1,
                     const uint8_t *keep) {
    int64_t stride = KACT_BYTES(K), rb = row_bytes(f, K);
    int groups = (M + KQ_GROUP - 1) / KQ_GROUP;
    for (int g = 0, m0 = 0; g < groups; g++) {
        int mt = (M - m0) / (groups - g);
        const uint8_t *a = kacts + m0 * stride;
        for (int n = n0; n < n1; n++) {
            const uint8_t *wrow = w + (int64_t)n * rb;
            float *out = y + (int64_t)m0 * N + n;
            if (keep && !keep[n]) {
                for (int i = 0; i < mt; i++) out[(int64_t)i * N] = -INFINITY;
                continue;
            }
            switch (f) {
            case W_Q4_K: kq_rows_of(a, stride, wrow, K, W_Q4_K, mt, out, N); break;
            case W_Q5_K: kq_rows_of(a, stride, wrow, K, W_Q5_K, mt, out, N); break;
            default: kq_rows_of(a, stride, wrow, K, W_Q6_K, mt, out, N); break;
            }
        }
        m0 += mt;
    }
}

#endif
