/* Short products (at most INT8_ROWS rows: decoding steps, speculative verification) of
 * quantized weights, the llama.cpp way: each row of x is quantized once per product to int8
 * in units of 32 values, then every weight unit's integer codes are multiplied with it in
 * integers and the scales applied in float.
 *
 * The rows (`quantize_rows`): per unit of 32 values a float scale da = max|x| / 127 and codes
 * a = round(x / da) in [-127, 127] (ties to even); per lane of 4 values (the lanes of the
 * integer dot products below) the negated sum of its 4 codes, the unit's da, and da times the
 * sum (for the formats with a minimum). A row's bytes: K codes, then K / 4 int32 negated
 * sums, K / 4 float da, K / 4 float da * sum: 4 K bytes (`ACT_BYTES`).
 *
 * The weights, per unit of 32 values (`Unit`): codes c in [0, 128] (unsigned, the first
 * operand of vpdpbusd / maddubs), a float scale per half of 16 values (S; the two halves
 * differ only in Q6_K, whose scales are per 16), an integer offset o (Q4_0 8, Q5_0 16, Q6_K 32)
 * or a float minimum M (Q4_1, Q5_1: m; Q4_K, Q5_K: -dmin * m_j). Q8_0's signed codes take
 * llama.cpp's sign trick: c = |w| and the row's codes negated where w < 0.
 *
 * An output is then, per lane l of 4 values of unit u (8 lanes a unit),
 *     I_l = sum of the 4 (c * a) - o * (sum of the 4 a)        exact, in int32
 *     acc[u % 2]_l += (float)I_l * (S_l * da_u)                 one multiply, one fused add
 *     acc[u % 2]_l += (da_u * sum_l) * M_u                      (formats with a minimum)
 * over the units in order, then the sum of acc[0] + acc[1]'s 8 lanes (`v8_hsum`'s order).
 * The integers are exact and every float operation of an output depends only on its row
 * and its weights, never on the other rows or on how the work is split: a row's result has
 * the same bits whatever the number of rows. The AVX2 and AVX-512 builds compute these same
 * operations (AVX-512 holds acc[0] and acc[1] as the halves of one register, two units per
 * instruction), so they give the same bits too; the portable build differs only where its
 * target has no fused multiply-add.
 *
 * Accuracy: the row's rounding moves each value by at most da / 2 = max|x| / 254 of its unit,
 * so an output moves by at most sum over units of max|x_u| / 254 * sum |w| over the unit (the
 * tests hold the kernels to that bound, plus float32 rounding). */
#ifndef SYNTAXLOCK_INT8_PRODUCTS_H
#define SYNTAXLOCK_INT8_PRODUCTS_H

#include "block_formats.h"

#define INT8_ROWS 32 /* products of at most this many rows take the int8 path */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define INT8_GROUP 8 /* rows that share one decoding of a weight row (their accumulators in registers) */
#else
#define INT8_GROUP 4
#endif
#define ACT_BYTES(K) ((int64_t)4 * (K)) /* a quantized row's bytes */

/* unit u (32 values at v) of a row: its codes, lane sums, da (scalar C: every build) */
static inline void quantize_unit(const float *v, int8_t *q, int32_t *nls, float *dal, float *lsd) {
    float d = quantize_codes(v, QK, q);
    for (int l = 0; l < 8; l++) {
        int s = q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3];
        nls[l] = -s;
        dal[l] = d;
        lsd[l] = d * (float)s;
    }
}

/* rows [0, M) of x [M, K] into `out` (ACT_BYTES(K) bytes a row). The x86 builds take 8 values
 * at a time where a unit's values are finite (the same operations: |x| max exact, one division,
 * one reciprocal, round-to-nearest-even conversions), the scalar code where not. */
static void quantize_rows(const float *x, int M, int K, uint8_t *out) {
    int L = K / 4;
    for (int i = 0; i < M; i++) {
        const float *r = x + (int64_t)i * K;
        uint8_t *o = out + (int64_t)i * ACT_BYTES(K);
        int8_t *q = (int8_t *)o;
        int32_t *nls = (int32_t *)(o + K);
        float *dal = (float *)(o + K) + L, *lsd = (float *)(o + K) + 2 * L;
        for (int u = 0; u < K / QK; u++) {
            const float *v = r + QK * u;
#ifdef KERNEL_X86
            const __m256 sign = _mm256_set1_ps(-0.0f);
            __m256 a0 = _mm256_loadu_ps(v), a1 = _mm256_loadu_ps(v + 8), a2 = _mm256_loadu_ps(v + 16),
                   a3 = _mm256_loadu_ps(v + 24);
            __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a0), _mm256_andnot_ps(sign, a1)),
                                     _mm256_max_ps(_mm256_andnot_ps(sign, a2), _mm256_andnot_ps(sign, a3)));
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
            float amax = _mm_cvtss_f32(h);
            __m256 finite = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(a0, a0, _CMP_ORD_Q), _mm256_cmp_ps(a1, a1, _CMP_ORD_Q)),
                                          _mm256_and_ps(_mm256_cmp_ps(a2, a2, _CMP_ORD_Q), _mm256_cmp_ps(a3, a3, _CMP_ORD_Q)));
            if (_mm256_movemask_ps(finite) == 0xFF && amax <= 3.4028234663852886e38f) {
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                __m256 vid = _mm256_set1_ps(id);
                __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(a0, vid)), c1 = _mm256_cvtps_epi32(_mm256_mul_ps(a1, vid)),
                        c2 = _mm256_cvtps_epi32(_mm256_mul_ps(a2, vid)), c3 = _mm256_cvtps_epi32(_mm256_mul_ps(a3, vid));
                __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
                p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); /* packs' lane order */
                p = _mm256_max_epi8(p, _mm256_set1_epi8(-127)); /* [-127, 127], as the scalar code */
                _mm256_storeu_si256((__m256i *)(q + QK * u), p);
                __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), _mm256_set1_epi16(1));
                _mm256_storeu_si256((__m256i *)(nls + 8 * u), _mm256_sub_epi32(_mm256_setzero_si256(), sums));
                __m256 vd = _mm256_set1_ps(d);
                _mm256_storeu_ps(dal + 8 * u, vd);
                _mm256_storeu_ps(lsd + 8 * u, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(sums)));
                continue;
            }
#endif
            quantize_unit(v, q + QK * u, nls + 8 * u, dal + 8 * u, lsd + 8 * u);
        }
    }
}

/* the constants of a format's units */
ALWAYS_INLINE int unit_offset_shift(const int f) { /* o = 1 << shift (0: none) */
    return f == W_Q4_0 ? 3 : f == W_Q5_0 ? 4 : f == W_Q6_K ? 5 : 0;
}
ALWAYS_INLINE int unit_has_min(const int f) { return f == W_Q4_1 || f == W_Q5_1 || f == W_Q4_K || f == W_Q5_K; }
ALWAYS_INLINE int is_kquant(const int f) { return f == W_Q4_K || f == W_Q5_K || f == W_Q6_K; }

/* a K-quant super-block's float scales and minimums, decoded once for its 8 units: Q4_K/Q5_K
 * s[j] = d * sc_j and m[j] = -(dmin * m_j) per unit j of 32 values; Q6_K s[g] = d * sc_g per 16
 * values (all exact) */
typedef struct { float s[16], m[8]; } Header;

ALWAYS_INLINE void kquant_header(const uint8_t *b, const int f, Header *h) {
    if (f == W_Q6_K) {
        float d = half_at(b + 208);
#ifdef KERNEL_X86
        __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        _mm256_storeu_ps(h->s, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(h->s + 8, _mm256_mul_ps(_mm256_set1_ps(d),
                                                 _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
#else
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int g = 0; g < 16; g++) h->s[g] = d * (float)sc[g];
#endif
        return;
    }
    /* the 12 bytes of 6-bit scales and mins as 8 bytes of each (llama.cpp's unpacking, the
     * same values as kquant_scale_min) */
    uint32_t t[4];
    memcpy(t, b + 4, 12);
    t[3] = ((t[2] >> 4) & 0x0f0f0f0fu) | (((t[1] >> 6) & 0x03030303u) << 4);
    uint32_t mins_low = t[1] & 0x3f3f3f3fu;
    t[1] = (t[2] & 0x0f0f0f0fu) | (((t[0] >> 6) & 0x03030303u) << 4);
    t[2] = mins_low;
    t[0] &= 0x3f3f3f3fu;
    float d = half_at(b), dmin = half_at(b + 2);
#ifdef KERNEL_X86
    __m128i sm = _mm_loadu_si128((const __m128i *)t);
    __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    _mm256_storeu_ps(h->s, _mm256_mul_ps(_mm256_set1_ps(d), sc));
    _mm256_storeu_ps(h->m, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mn), _mm256_set1_ps(-0.0f)));
#else
    uint8_t sm[16];
    memcpy(sm, t, 16);
    for (int j = 0; j < 8; j++) {
        h->s[j] = d * (float)sm[j];
        h->m[j] = -(dmin * (float)sm[8 + j]);
    }
#endif
}

/* where unit u's bytes are: its block (legacy) or super-block (K-quant) */
ALWAYS_INLINE const uint8_t *unit_block(const uint8_t *row, const int f, int u) {
    return is_kquant(f) ? row + (int64_t)(u / 8) * format_bytes(f) : row + (int64_t)u * format_bytes(f);
}

#ifdef KERNEL_X86
typedef struct {
    __m256i codes; /* 32 unsigned codes */
    __m256i sign;  /* Q8_0: the signed weights (their signs go to the row's codes) */
    __m256 scale;  /* S per lane */
    float m;       /* the minimum (formats with one) */
} Unit;

ALWAYS_INLINE __m256i nibbles(__m128i q) { /* 16 bytes: values 0-15 the low nibbles, 16-31 the high ones */
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m4)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), m4), 1);
}

ALWAYS_INLINE __m256i high_bits(const uint8_t *p) { /* 32 bits: 0x10 in byte i where bit i is set */
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuffle);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

ALWAYS_INLINE __m256i shift_right16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

ALWAYS_INLINE Unit decode_unit(const uint8_t *row, const int f, int u, const Header *h) {
    Unit r;
    r.sign = _mm256_setzero_si256();
    r.m = 0.0f;
    const uint8_t *b = unit_block(row, f, u);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (f == W_Q8_0) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(b + 2));
        r.codes = _mm256_abs_epi8(w);
        r.sign = w;
        r.scale = _mm256_set1_ps(half_at(b));
    } else if (f == W_Q4_0 || f == W_Q4_1) {
        r.codes = nibbles(_mm_loadu_si128((const __m128i *)(b + (f == W_Q4_1 ? 4 : 2))));
        r.scale = _mm256_set1_ps(half_at(b));
        if (f == W_Q4_1) r.m = half_at(b + 2);
    } else if (f == W_Q5_0 || f == W_Q5_1) {
        int at = f == W_Q5_1 ? 4 : 2;
        r.codes = _mm256_or_si256(nibbles(_mm_loadu_si128((const __m128i *)(b + at + 4))), high_bits(b + at));
        r.scale = _mm256_set1_ps(half_at(b));
        if (f == W_Q5_1) r.m = half_at(b + 2);
    } else if (f == W_Q4_K || f == W_Q5_K) {
        int j = u % 8;
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + (f == W_Q5_K ? 48 : 16) + 32 * (j / 2)));
        r.codes = _mm256_and_si256(shift_right16(q, 4 * (j & 1)), m4);
        if (f == W_Q5_K) {
            __m256i hb = _mm256_and_si256(shift_right16(_mm256_loadu_si256((const __m256i *)(b + 16)), j),
                                          _mm256_set1_epi8(1));
            r.codes = _mm256_or_si256(r.codes, _mm256_slli_epi16(hb, 4));
        }
        r.scale = _mm256_set1_ps(h->s[j]);
        r.m = h->m[j];
    } else { /* W_Q6_K */
        int t = u % 8, hh = t / 4, s = t % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * hh + 32 * (s & 1)));
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * hh));
        __m256i lo = _mm256_and_si256(shift_right16(l, 4 * (s >> 1)), m4);
        __m256i hi = _mm256_and_si256(shift_right16(hb, 2 * s), _mm256_set1_epi8(3));
        r.codes = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        r.scale = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(h->s[2 * t])),
                                       _mm_set1_ps(h->s[2 * t + 1]), 1);
    }
    return r;
}

/* a row's unit u: codes, negated lane sums, da per lane, da * sum per lane */
#define ROW_CODES(r, u) ((r) + 32 * (int64_t)(u))
#define ROW_NLS(r, K, u) ((const int32_t *)((r) + (K)) + 8 * (int64_t)(u))
#define ROW_DAL(r, K, u) ((const float *)((r) + (K)) + (K) / 4 + 8 * (int64_t)(u))
#define ROW_LSD(r, K, u) ((const float *)((r) + (K)) + (K) / 2 + 8 * (int64_t)(u))

/* one unit of one row into acc (8 lanes; AVX2 instructions, also the AVX-512 build's tail) */
ALWAYS_INLINE __m256 unit_into(__m256 acc, const Unit *w, const uint8_t *r, int K, int u, const int f) {
    __m256i x = _mm256_loadu_si256((const __m256i *)ROW_CODES(r, u));
    if (f == W_Q8_0) x = _mm256_sign_epi8(x, w->sign);
    __m256i I = _mm256_madd_epi16(_mm256_maddubs_epi16(w->codes, x), _mm256_set1_epi16(1));
    const int shift = unit_offset_shift(f);
    if (shift) I = _mm256_add_epi32(I, _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)ROW_NLS(r, K, u)),
                                                        _mm_cvtsi32_si128(shift)));
    __m256 P = _mm256_mul_ps(w->scale, _mm256_loadu_ps(ROW_DAL(r, K, u)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), P, acc);
    if (unit_has_min(f)) acc = _mm256_fmadd_ps(_mm256_loadu_ps(ROW_LSD(r, K, u)), _mm256_set1_ps(w->m), acc);
    return acc;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* Two units (u, u + 1; u even) of a weight row, decoded together into 512-bit registers: the
 * low half of each the unit u, the high half unit u + 1. With VNNI, Q8_0's codes are the
 * weights plus 128 (w ^ 0x80: vpdpbusd does not saturate) and its offset 128; without, the
 * sign trick as in the AVX2 path (maddubs saturates past 128 * 127 * 2). The integers are the
 * same either way. */
typedef struct {
    __m512i codes;
    __mmask64 neg; /* Q8_0 without VNNI: the row's codes to negate */
    __m512 S, M;
} Pair;

#ifdef __AVX512VNNI__
#define Q8_0_PAIR_SHIFT 7
#else
#define Q8_0_PAIR_SHIFT 0
#endif
ALWAYS_INLINE int pair_offset_shift(const int f) { return f == W_Q8_0 ? Q8_0_PAIR_SHIFT : unit_offset_shift(f); }

/* float lanes [v[a] x 8, v[b] x 8] of the 4 floats v */
ALWAYS_INLINE __m512 halves_of(__m128 v, int a, int b) {
    __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(a)), _mm256_set1_epi32(b), 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* [the 16 bytes at p0 | the 16 at p1] split in nibbles: [low p0, high p0, low p1, high p1] */
ALWAYS_INLINE __m512i nibbles2(const uint8_t *p0, const uint8_t *p1) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                        _mm_loadu_si128((const __m128i *)p1), 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                   _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

ALWAYS_INLINE Pair decode_pair(const uint8_t *row, const int f, int u, const Header *h) {
    Pair r;
    r.neg = 0;
    r.M = _mm512_setzero_ps();
    const uint8_t *b = unit_block(row, f, u);
    if (f == W_Q8_0) {
        const uint8_t *b1 = b + 34;
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 2))),
                                       _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
#ifdef __AVX512VNNI__
        r.codes = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
#else
        r.codes = _mm512_abs_epi8(w);
        r.neg = _mm512_movepi8_mask(w);
#endif
        uint16_t d0, d1;
        memcpy(&d0, b, 2);
        memcpy(&d1, b1, 2);
        r.S = halves_of(_mm_cvtph_ps(_mm_cvtsi32_si128((int)(d0 | (uint32_t)d1 << 16))), 0, 1);
    } else if (f == W_Q4_0 || f == W_Q4_1 || f == W_Q5_0 || f == W_Q5_1) {
        const int bytes = format_bytes(f), with_min = f == W_Q4_1 || f == W_Q5_1;
        const int five = f == W_Q5_0 || f == W_Q5_1, at = (with_min ? 4 : 2) + (five ? 4 : 0);
        const uint8_t *b1 = b + bytes;
        r.codes = nibbles2(b + at, b1 + at);
        if (five) {
            uint32_t h0, h1;
            memcpy(&h0, b + at - 4, 4);
            memcpy(&h1, b1 + at - 4, 4);
            __mmask64 high = (__mmask64)h0 | (__mmask64)h1 << 32;
            r.codes = _mm512_or_si512(r.codes, _mm512_maskz_mov_epi8(high, _mm512_set1_epi8(0x10)));
        }
        if (with_min) { /* d and m side by side: [d0, m0, d1, m1] */
            uint32_t h0, h1;
            memcpy(&h0, b, 4);
            memcpy(&h1, b1, 4);
            __m128 dm = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)(h0 | (uint64_t)h1 << 32)));
            r.S = halves_of(dm, 0, 2);
            r.M = halves_of(dm, 1, 3);
        } else {
            uint16_t d0, d1;
            memcpy(&d0, b, 2);
            memcpy(&d1, b1, 2);
            r.S = halves_of(_mm_cvtph_ps(_mm_cvtsi32_si128((int)(d0 | (uint32_t)d1 << 16))), 0, 1);
        }
    } else if (f == W_Q4_K || f == W_Q5_K) {
        int c = (u % 8) / 2; /* the pair's 32 bytes: unit 2c the low nibbles, 2c + 1 the high ones */
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + (f == W_Q5_K ? 48 : 16) + 32 * c));
        r.codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                     _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
        if (f == W_Q5_K) { /* bit 2c (low half) and 2c + 1 (high half) of the 32 high-bit bytes */
            __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
            __m512i sel = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                                             _mm256_set1_epi8((char)(2 << (2 * c))), 1);
            r.codes = _mm512_or_si512(r.codes,
                                      _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hb, sel), _mm512_set1_epi8(0x10)));
        }
        __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * c)),
                                         _mm256_set1_epi32(2 * c + 1), 1);
        r.S = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(h->s)));
        r.M = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(h->m)));
    } else { /* W_Q6_K: pair p = units 2p, 2p + 1 = 4 hh + s, s + 1 (s = 2 (p % 2)) */
        int p = (u % 8) / 2, hh = p / 2, nib = p % 2;
        __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * hh)); /* unit s: 32 bytes, unit s + 1: the next 32 */
        __m512i lo = _mm512_and_si512(_mm512_srl_epi16(ql, _mm_cvtsi32_si128(4 * nib)), _mm512_set1_epi8(0x0F));
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * hh)));
        __m512i shifts = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(4 * nib))),
                                            _mm256_set1_epi16((short)(4 * nib + 2)), 1);
        __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts), _mm512_set1_epi8(3));
        r.codes = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
        __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * p),
                                       _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
        r.S = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(h->s));
    }
    return r;
}

/* two units (u, u + 1) of one row into acc: the low half acc[0] (u even), the high half acc[1] */
ALWAYS_INLINE __m512 pair_into(__m512 acc, const Pair *w, const uint8_t *r, int K, int u, const int f) {
    __m512i x = _mm512_loadu_si512((const void *)ROW_CODES(r, u));
    const int shift = pair_offset_shift(f);
    __m512i I = shift ? _mm512_sll_epi32(_mm512_loadu_si512((const void *)ROW_NLS(r, K, u)), _mm_cvtsi32_si128(shift))
                      : _mm512_setzero_si512();
#ifdef __AVX512VNNI__
    I = _mm512_dpbusd_epi32(I, w->codes, x);
#else
    if (f == W_Q8_0) x = _mm512_mask_sub_epi8(x, w->neg, _mm512_setzero_si512(), x);
    I = _mm512_add_epi32(I, _mm512_madd_epi16(_mm512_maddubs_epi16(w->codes, x), _mm512_set1_epi16(1)));
#endif
    __m512 P = _mm512_mul_ps(w->S, _mm512_loadu_ps(ROW_DAL(r, K, u)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), P, acc);
    if (unit_has_min(f)) acc = _mm512_fmadd_ps(_mm512_loadu_ps(ROW_LSD(r, K, u)), w->M, acc);
    return acc;
}

/* mt rows (at `acts`, `stride` bytes apart) times units [u0, u1) of one weight row (u0 a multiple
 * of 8), into the rows' accumulators at acc + 16 i (lanes 0-7: the even units', 8-15: the odd
 * units'), loaded and stored back */
ALWAYS_INLINE void int_tile(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, int u0, int u1,
                            float *accs, const int f, const int mt) {
    __m512 acc[INT8_GROUP];
    for (int i = 0; i < mt; i++) acc[i] = _mm512_loadu_ps(accs + 16 * i);
    int u = u0;
    Header h;
    for (; u + 2 <= u1; u += 2) {
        if (is_kquant(f) && u % 8 == 0) kquant_header(unit_block(wrow, f, u), f, &h);
        Pair w = decode_pair(wrow, f, u, &h);
        for (int i = 0; i < mt; i++) acc[i] = pair_into(acc[i], &w, acts + i * stride, K, u, f);
    }
    if (u < u1) { /* an odd last unit: into the low half (acc[0]) */
        if (is_kquant(f) && u % 8 == 0) kquant_header(unit_block(wrow, f, u), f, &h);
        Unit a = decode_unit(wrow, f, u, &h);
        for (int i = 0; i < mt; i++) {
            __m256 lo = unit_into(_mm512_castps512_ps256(acc[i]), &a, acts + i * stride, K, u, f);
            acc[i] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(acc[i]), _mm256_castps_pd(lo), 0));
        }
    }
    for (int i = 0; i < mt; i++) _mm512_storeu_ps(accs + 16 * i, acc[i]);
}
#else
ALWAYS_INLINE void int_tile(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, int u0, int u1,
                            float *accs, const int f, const int mt) {
    __m256 acc[INT8_GROUP][2];
    for (int i = 0; i < mt; i++) {
        acc[i][0] = _mm256_loadu_ps(accs + 16 * i);
        acc[i][1] = _mm256_loadu_ps(accs + 16 * i + 8);
    }
    Header h;
    int u = u0;
    /* two units a step (u0 is even), so that acc[i][0] and acc[i][1] are named at compile time
     * and stay in registers (indexed by u & 1 they lived on the stack: each unit's FMAs waited
     * on a store and a reload); the same operations in the same order */
    for (; u + 2 <= u1; u += 2) {
        if (is_kquant(f) && u % 8 == 0) kquant_header(unit_block(wrow, f, u), f, &h);
        Unit a = decode_unit(wrow, f, u, &h);
        Unit b = decode_unit(wrow, f, u + 1, &h);
        for (int i = 0; i < mt; i++) {
            acc[i][0] = unit_into(acc[i][0], &a, acts + i * stride, K, u, f);
            acc[i][1] = unit_into(acc[i][1], &b, acts + i * stride, K, u + 1, f);
        }
    }
    if (u < u1) { /* an odd last unit (even: acc[i][0]) */
        if (is_kquant(f) && u % 8 == 0) kquant_header(unit_block(wrow, f, u), f, &h);
        Unit a = decode_unit(wrow, f, u, &h);
        for (int i = 0; i < mt; i++) acc[i][0] = unit_into(acc[i][0], &a, acts + i * stride, K, u, f);
    }
    for (int i = 0; i < mt; i++) {
        _mm256_storeu_ps(accs + 16 * i, acc[i][0]);
        _mm256_storeu_ps(accs + 16 * i + 8, acc[i][1]);
    }
}
#endif

#else /* the portable build: the same operations in plain C */
typedef struct {
    int8_t c[32];  /* the codes minus the offset (Q8_0: the signed codes themselves) */
    float scale[8];
    float m;
} Unit;

ALWAYS_INLINE Unit decode_unit(const uint8_t *row, const int f, int u, const Header *h) {
    Unit r;
    r.m = 0.0f;
    const uint8_t *b = unit_block(row, f, u);
    float s0 = 0.0f, s1;
    if (f == W_Q8_0) {
        for (int i = 0; i < 32; i++) r.c[i] = (int8_t)b[2 + i];
        s0 = half_at(b);
    } else if (f == W_Q4_0 || f == W_Q4_1) {
        const uint8_t *q = b + (f == W_Q4_1 ? 4 : 2);
        int o = f == W_Q4_0 ? 8 : 0;
        for (int i = 0; i < 16; i++) {
            r.c[i] = (int8_t)((q[i] & 0x0F) - o);
            r.c[i + 16] = (int8_t)((q[i] >> 4) - o);
        }
        s0 = half_at(b);
        if (f == W_Q4_1) r.m = half_at(b + 2);
    } else if (f == W_Q5_0 || f == W_Q5_1) {
        int at = f == W_Q5_1 ? 4 : 2, o = f == W_Q5_0 ? 16 : 0;
        uint32_t qh;
        memcpy(&qh, b + at, 4);
        const uint8_t *q = b + at + 4;
        for (int i = 0; i < 16; i++) {
            r.c[i] = (int8_t)(((q[i] & 0x0F) | (((qh >> i) & 1) << 4)) - o);
            r.c[i + 16] = (int8_t)(((q[i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - o);
        }
        s0 = half_at(b);
        if (f == W_Q5_1) r.m = half_at(b + 2);
    } else if (f == W_Q4_K || f == W_Q5_K) {
        int j = u % 8;
        const uint8_t *q = b + (f == W_Q5_K ? 48 : 16) + 32 * (j / 2);
        for (int i = 0; i < 32; i++) {
            int code = (q[i] >> (4 * (j & 1))) & 0x0F;
            if (f == W_Q5_K) code |= ((b[16 + i] >> j) & 1) << 4;
            r.c[i] = (int8_t)code;
        }
        s0 = h->s[j];
        r.m = h->m[j];
    } else { /* W_Q6_K */
        int t = u % 8, hh = t / 4, s = t % 4;
        const uint8_t *l = b + 64 * hh + 32 * (s & 1), *hb = b + 128 + 32 * hh;
        for (int i = 0; i < 32; i++)
            r.c[i] = (int8_t)((((l[i] >> (4 * (s >> 1))) & 0x0F) | (((hb[i] >> (2 * s)) & 3) << 4)) - 32);
        s0 = h->s[2 * t];
        s1 = h->s[2 * t + 1];
    }
    if (f != W_Q6_K) s1 = s0;
    for (int l = 0; l < 8; l++) r.scale[l] = l < 4 ? s0 : s1;
    return r;
}

ALWAYS_INLINE void int_tile(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, int u0, int u1,
                            float *accs, const int f, const int mt) {
    Header h;
    int L = K / 4;
    for (int u = u0; u < u1; u++) {
        if (is_kquant(f) && u % 8 == 0) kquant_header(unit_block(wrow, f, u), f, &h);
        Unit w = decode_unit(wrow, f, u, &h);
        for (int i = 0; i < mt; i++) {
            const uint8_t *r = acts + i * stride;
            const int8_t *x = (const int8_t *)r + QK * u;
            const float *dal = (const float *)(r + K) + L + 8 * u, *lsd = (const float *)(r + K) + 2 * L + 8 * u;
            float *a = accs + 16 * i + 8 * (u & 1);
            for (int l = 0; l < 8; l++) {
                int I = 0;
                for (int e = 0; e < 4; e++) I += w.c[4 * l + e] * x[4 * l + e];
                a[l] = FMA((float)I, w.scale[l] * dal[l], a[l]);
                if (unit_has_min(f)) a[l] = FMA(lsd[l], w.m, a[l]);
            }
        }
    }
}
#endif

/* int_tile compiled for each quantized format (f a constant in each copy) */
ALWAYS_INLINE void int_tile_rows(const uint8_t *acts, int64_t stride, const uint8_t *wrow, int K, int u0, int u1,
                                 float *accs, const int f, int mt) {
    switch (mt) {
    case 1: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 1); break;
    case 2: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 2); break;
    case 3: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 3); break;
#if INT8_GROUP > 4
    case 4: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 4); break;
    case 5: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 5); break;
    case 6: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 6); break;
    case 7: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 7); break;
    default: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 8); break;
#else
    default: int_tile(acts, stride, wrow, K, u0, u1, accs, f, 4); break;
#endif
    }
}

#define INT8_CHUNK_BYTES 16384 /* a group's rows' chunk stays in L1 for all its outputs */
#define INT8_OUTPUTS 16 /* outputs at most per int_block call (matmul_block's NB) */

/* outputs [n0, n1) (at most INT8_OUTPUTS) of every row: y[m, n] for the M rows quantized at
 * `acts` and weights `w` [N, K] of quantized format f. Per group of up to INT8_GROUP rows (as
 * even as can be), K in chunks of whole super-blocks whose rows' bytes fit INT8_CHUNK_BYTES
 * (8 rows: 16 units; one row: 128), each chunk over every output: the rows' chunk is read from
 * L1, each weight row decoded once per group, and a weight row read in few pieces (long
 * sequential runs for the prefetcher). The accumulators wait in memory between chunks; an
 * output's operations are those of one pass over its units. */
static void int_block(const uint8_t *acts, const uint8_t *w, int f, float *y, int M, int N, int K, int n0, int n1,
                      const uint8_t *keep) {
    int64_t stride = ACT_BYTES(K), rb = row_bytes(f, K);
    int groups = (M + INT8_GROUP - 1) / INT8_GROUP, U = K / QK;
    float accs[INT8_OUTPUTS][INT8_GROUP * 16];
    for (int g = 0, m0 = 0; g < groups; g++) {
        int mt = (M - m0) / (groups - g);
        const uint8_t *a = acts + m0 * stride;
        int chunk = (int)(INT8_CHUNK_BYTES / (mt * ACT_BYTES(QK))) & ~7; /* whole super-blocks */
        for (int n = n0; n < n1; n++) memset(accs[n - n0], 0, sizeof(float) * 16 * (size_t)mt);
        for (int u0 = 0; u0 < U; u0 += chunk) {
            int u1 = u0 + chunk < U ? u0 + chunk : U;
            int64_t at = unit_block(w, f, u0) - w, piece = unit_block(w, f, u1 - 1) - w + format_bytes(f) - at;
            for (int n = n0; n < n1; n++) {
                if (keep && !keep[n]) continue;
                const uint8_t *wrow = w + (int64_t)n * rb;
                float *acc = accs[n - n0];
                /* the next piece of weights this loop reads: the prefetcher loses track of pieces;
                 * with rows skipped, the wanted row after the next (the next one was fetched a
                 * row ago: skipped rows break the hardware prefetcher's stream) */
                const uint8_t *next = NULL;
                if (!keep) {
                    next = n + 1 < n1 ? wrow + rb + at : u1 < U ? w + (int64_t)n0 * rb + (unit_block(w, f, u1) - w) : NULL;
                } else {
                    int nn = n + 1, seen = 0;
                    for (; nn < n1 && seen < 2; nn++) seen += keep[nn] != 0;
                    if (seen == 2) next = w + (int64_t)(nn - 1) * rb + at;
                }
                if (next)
                    for (int64_t off = 0; off < piece; off += 64) __builtin_prefetch(next + off);
                switch (f) {
                case W_Q4_0: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q4_0, mt); break;
                case W_Q4_1: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q4_1, mt); break;
                case W_Q5_0: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q5_0, mt); break;
                case W_Q5_1: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q5_1, mt); break;
                case W_Q8_0: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q8_0, mt); break;
                case W_Q4_K: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q4_K, mt); break;
                case W_Q5_K: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q5_K, mt); break;
                default: int_tile_rows(a, stride, wrow, K, u0, u1, acc, W_Q6_K, mt); break;
                }
            }
        }
        for (int n = n0; n < n1; n++)
            for (int i = 0; i < mt; i++) {
                if (keep && !keep[n]) {
                    y[(int64_t)(m0 + i) * N + n] = -INFINITY;
                    continue;
                }
                const float *r = accs[n - n0] + 16 * i;
                v8 sum = v8_add(v8_load(r), v8_load(r + 8)); /* acc[0] + acc[1], then the 8 lanes */
                y[(int64_t)(m0 + i) * N + n] = v8_hsum(sum);
            }
        m0 += mt;
    }
}
#endif
