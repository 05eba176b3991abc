/* Eight float32 lanes, the unit of the kernels' float arithmetic (decode_kernels.c), in two
 * implementations with the same operations lane for lane:
 * - x86 with AVX2, FMA and F16C (the "avx2" and "avx512" builds): an __m256;
 * - anything else (the "portable" build: ARM laptops, old x86): eight floats in a struct,
 *   plain C loops that gcc vectorises where the target can (NEON, SSE2); float16 converted
 *   by hand, exactly (the conversions of Maratos Dukhan's FP16 library: bit operations and
 *   float arithmetic in round-to-nearest, so the build needs -ffp-contract=off and no
 *   -ffast-math).
 * `FMA(a, b, c)` is one rounding where the target has a fast fused multiply-add (x86 builds,
 * AArch64), a multiply then an add where it has none (the portable build on old x86: a
 * libm fmaf call per element would be ~20 times slower). Either way a build computes every
 * output with the same operations whatever the number of rows, which is what matters. */
#ifndef SYNTAXLOCK_SIMD_H
#define SYNTAXLOCK_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KERNEL_X86 1
#include <immintrin.h>
#endif

#if defined(KERNEL_X86) || defined(__FP_FAST_FMAF)
#define FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define FMA(a, b, c) ((a) * (b) + (c))
#endif

ALWAYS_INLINE float bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
ALWAYS_INLINE uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* float16 bits -> float32, exact (subnormals, infinities and NaNs included) */
ALWAYS_INLINE float half_to_float(uint16_t h) {
#ifdef KERNEL_X86
    return _cvtsh_ss(h);
#else
    uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    float normalized = bits_float((two_w >> 4) + (0xE0u << 23)) * bits_float(0x7800000u); /* 2^-112 */
    float denormalized = bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = sign | (two_w < (1u << 27) ? float_bits(denormalized) : float_bits(normalized));
    return bits_float(r);
#endif
}

/* float32 -> the nearest float16 (ties to even; overflow to infinity; NaN stays NaN) */
ALWAYS_INLINE uint16_t float_to_half(float f) {
#ifdef KERNEL_X86
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    float base = (__builtin_fabsf(f) * bits_float(0x77800000u)) * bits_float(0x08800000u); /* 2^112, 2^-110 */
    uint32_t w = float_bits(f), shl1_w = w + w, sign = w & 0x80000000u, bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = bits_float((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = float_bits(base);
    uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
#endif
}

/* nearest integer, ties to even, for |v| < 2^22 (1.5 * 2^23 added and taken off; not folded
 * without -ffast-math) */
ALWAYS_INLINE float round_even(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* n values at v as int8 codes q = round(v / d) (ties to even, within [-127, 127]) under the scale
 * d = max|v| / 127, which it returns: the activations' quantization of both integer products
 * (int8_products.h's units of 32, kquant_products.h's blocks of 256), scalar C in every build */
ALWAYS_INLINE float quantize_codes(const float *v, const int n, int8_t *q) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = __builtin_fabsf(v[j]);
        if (!(a <= amax) && amax == amax) amax = a; /* a NaN wins (and stays): the outputs become NaN, as a float product's */
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) {
        float t = round_even(v[j] * id);
        t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
        q[j] = (int8_t)(t == t ? (int)t : 0);
    }
    return d;
}

#ifdef KERNEL_X86
typedef __m256 v8;
ALWAYS_INLINE v8 v8_zero(void) { return _mm256_setzero_ps(); }
ALWAYS_INLINE v8 v8_set1(float a) { return _mm256_set1_ps(a); }
ALWAYS_INLINE v8 v8_load(const float *p) { return _mm256_loadu_ps(p); }
ALWAYS_INLINE void v8_store(float *p, v8 v) { _mm256_storeu_ps(p, v); }
ALWAYS_INLINE v8 v8_add(v8 a, v8 b) { return _mm256_add_ps(a, b); }
ALWAYS_INLINE v8 v8_sub(v8 a, v8 b) { return _mm256_sub_ps(a, b); }
ALWAYS_INLINE v8 v8_mul(v8 a, v8 b) { return _mm256_mul_ps(a, b); }
ALWAYS_INLINE v8 v8_fma(v8 a, v8 b, v8 c) { return _mm256_fmadd_ps(a, b, c); }
/* 8 float16 values (bits) as float32 */
ALWAYS_INLINE v8 v8_load_half(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* 8 floats rounded to the nearest float16 (ties to even, as PyTorch's conversion) */
ALWAYS_INLINE void v8_store_half(uint16_t *p, v8 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
/* the sum of the 8 lanes: halves added, then pairs, then the two left */
ALWAYS_INLINE float v8_hsum(v8 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* The attention's scores (decode_kernels.c): a key's 8 lanes summed as ((l0 + l1) + (l2 + l3)) +
 * ((l4 + l5) + (l6 + l7)), one key alone or 2 or 4 side by side (horizontal adds: a few
 * instructions for 4 keys where `v8_hsum` takes 6 a key), the same bits however many; the sums
 * of several times `scale` into out. */
ALWAYS_INLINE float v8_tree_sum(v8 a) {
    __m256 h = _mm256_hadd_ps(a, a), q = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}
ALWAYS_INLINE void v8_tree_sums2(v8 a0, v8 a1, float scale, float *out) {
    __m256 h = _mm256_hadd_ps(a0, a1), q = _mm256_hadd_ps(h, h);
    __m128 s = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)), _mm_set1_ps(scale));
    _mm_storel_pi((__m64 *)out, s);
}
ALWAYS_INLINE void v8_tree_sums4(v8 a0, v8 a1, v8 a2, v8 a3, float scale, float *out) {
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
    _mm_storeu_ps(out, _mm_mul_ps(s, _mm_set1_ps(scale)));
}

/* e^x for x <= 0, 8 at a time: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial
 * (relative error ~2e-7), 2^n by the exponent bits; below -87 the result is 0. */
ALWAYS_INLINE v8 v8_exp_neg(v8 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 out = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, out);
}

/* x / (1 + e^-y), 8 at a time: x times the logistic function of y, from e = e^-|y| (never
 * overflows): x / (1 + e) where y >= 0, x e / (1 + e) where not (no cancellation either way) */
ALWAYS_INLINE v8 v8_times_logistic(v8 x, v8 y) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = v8_exp_neg(_mm256_or_ps(y, _mm256_set1_ps(-0.0f)));
    __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GE_OQ));
    return _mm256_div_ps(_mm256_mul_ps(x, num), _mm256_add_ps(one, e));
}
#else
typedef struct { float f[8]; } v8;
#define V8_EACH(expr) do { for (int l_ = 0; l_ < 8; l_++) r.f[l_] = (expr); } while (0)
ALWAYS_INLINE v8 v8_zero(void) { v8 r; V8_EACH(0.0f); return r; }
ALWAYS_INLINE v8 v8_set1(float a) { v8 r; V8_EACH(a); return r; }
ALWAYS_INLINE v8 v8_load(const float *p) { v8 r; memcpy(r.f, p, sizeof r.f); return r; }
ALWAYS_INLINE void v8_store(float *p, v8 v) { memcpy(p, v.f, sizeof v.f); }
ALWAYS_INLINE v8 v8_add(v8 a, v8 b) { v8 r; V8_EACH(a.f[l_] + b.f[l_]); return r; }
ALWAYS_INLINE v8 v8_sub(v8 a, v8 b) { v8 r; V8_EACH(a.f[l_] - b.f[l_]); return r; }
ALWAYS_INLINE v8 v8_mul(v8 a, v8 b) { v8 r; V8_EACH(a.f[l_] * b.f[l_]); return r; }
ALWAYS_INLINE v8 v8_fma(v8 a, v8 b, v8 c) { v8 r; V8_EACH(FMA(a.f[l_], b.f[l_], c.f[l_])); return r; }
ALWAYS_INLINE v8 v8_load_half(const uint16_t *p) { v8 r; V8_EACH(half_to_float(p[l_])); return r; }
ALWAYS_INLINE void v8_store_half(uint16_t *p, v8 v) { for (int l = 0; l < 8; l++) p[l] = float_to_half(v.f[l]); }
ALWAYS_INLINE float v8_hsum(v8 v) { /* the x86 order: halves, then pairs, then the two left */
    float a0 = v.f[0] + v.f[4], a1 = v.f[1] + v.f[5], a2 = v.f[2] + v.f[6], a3 = v.f[3] + v.f[7];
    float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

ALWAYS_INLINE float v8_tree_sum(v8 a) { /* the x86 order */
    return ((a.f[0] + a.f[1]) + (a.f[2] + a.f[3])) + ((a.f[4] + a.f[5]) + (a.f[6] + a.f[7]));
}
ALWAYS_INLINE void v8_tree_sums2(v8 a0, v8 a1, float scale, float *out) {
    out[0] = v8_tree_sum(a0) * scale;
    out[1] = v8_tree_sum(a1) * scale;
}
ALWAYS_INLINE void v8_tree_sums4(v8 a0, v8 a1, v8 a2, v8 a3, float scale, float *out) {
    v8_tree_sums2(a0, a1, scale, out);
    v8_tree_sums2(a2, a3, scale, out + 2);
}

ALWAYS_INLINE v8 v8_exp_neg(v8 x) { /* the x86 version's steps, lane by lane */
    v8 r;
    for (int l = 0; l < 8; l++) {
        float v = x.f[l];
        int under = v < -87.0f;
        v = v < -87.0f ? -87.0f : v;
        float n = round_even(v * 1.44269504088896341f);
        float t = FMA(-n, 0.693359375f, v);
        t = FMA(-n, -2.12194440e-4f, t);
        float p = 1.0f / 720;
        p = FMA(p, t, 1.0f / 120);
        p = FMA(p, t, 1.0f / 24);
        p = FMA(p, t, 1.0f / 6);
        p = FMA(p, t, 0.5f);
        p = FMA(p, t, 1.0f);
        p = FMA(p, t, 1.0f);
        float out = p * bits_float((uint32_t)((int32_t)n + 127) << 23);
        r.f[l] = under ? 0.0f : out;
    }
    return r;
}

ALWAYS_INLINE v8 v8_times_logistic(v8 x, v8 y) { /* the x86 version's steps, lane by lane */
    v8 ny, r;
    for (int l = 0; l < 8; l++) ny.f[l] = -fabsf(y.f[l]);
    v8 e = v8_exp_neg(ny);
    for (int l = 0; l < 8; l++) r.f[l] = (x.f[l] * (y.f[l] >= 0.0f ? 1.0f : e.f[l])) / (1.0f + e.f[l]);
    return r;
}
#endif

#endif
