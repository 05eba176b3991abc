/* GGUF's storage formats of a weight matrix [N, K] (block_weights.py's `WeightFormat`, ggml's
 * type numbers) and their exact de-quantization to float32.
 *
 * A row is K / values(format) blocks of bytes(format) bytes, in ggml's layouts:
 *   Q4_0  18 bytes / 32: float16 d, 16 bytes of 4-bit codes     value = d * (q - 8)
 *   Q4_1  20 bytes / 32: float16 d, float16 m, 16 bytes          value = d * q + m
 *   Q5_0  22 bytes / 32: float16 d, 32 high bits, 16 bytes        value = d * (q - 16)
 *   Q5_1  24 bytes / 32: float16 d, m, 32 high bits, 16 bytes     value = d * q + m
 *   Q8_0  34 bytes / 32: float16 d, 32 int8 codes                 value = d * q
 *   Q4_K 144 bytes / 256: float16 d, dmin, 12 bytes of 6-bit scales and mins (8 of each),
 *        128 bytes of 4-bit codes; sub-block j of 32: value = (d * sc_j) * q - dmin * m_j
 *   Q5_K 176 bytes / 256: as Q4_K plus 32 bytes of high bits (bit j of byte i: value i of
 *        sub-block j)
 *   Q6_K 210 bytes / 256: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales, float16
 *        d; 16 sub-blocks of 16: value = (d * sc) * (q - 32)
 *   F32, BF16: one value per "block" (4 and 2 bytes); F16 is multiplied by `half_matmul`.
 * In the 32-value legacy blocks, value j < 16 is the low nibble of code byte j and value
 * j + 16 its high nibble; where each K-quant value's bits are: `kquant_unit` below.
 *
 * Every value is gguf's numpy `dequantize` bit for bit: d * q is exact in float32 (11-bit
 * scale times a code of at most 8 bits; Q6_K's (d * sc) * q is 11 + 7 + 5 = 23 bits, exact
 * too), and the formats with a minimum add or subtract it once, one rounding, as numpy
 * does after its exact product. */
#ifndef SYNTAXLOCK_BLOCK_FORMATS_H
#define SYNTAXLOCK_BLOCK_FORMATS_H

#include "simd.h"

enum {
    W_F32 = 0, W_F16 = 1, W_Q4_0 = 2, W_Q4_1 = 3, W_Q5_0 = 6, W_Q5_1 = 7, W_Q8_0 = 8,
    W_Q4_K = 12, W_Q5_K = 13, W_Q6_K = 14, W_BF16 = 30
};
#define QK 32   /* values per legacy block, and per unit of the int8 products */
#define QKK 256 /* values per K-quant super-block */

static inline int format_values(int f) {
    return f == W_F32 || f == W_F16 || f == W_BF16 ? 1 : f >= W_Q4_K && f <= W_Q6_K ? QKK : QK;
}

static inline int format_bytes(int f) {
    switch (f) {
    case W_F32: return 4;
    case W_F16: case W_BF16: return 2;
    case W_Q4_0: return 18;
    case W_Q4_1: return 20;
    case W_Q5_0: return 22;
    case W_Q5_1: return 24;
    case W_Q8_0: return 34;
    case W_Q4_K: return 144;
    case W_Q5_K: return 176;
    case W_Q6_K: return 210;
    default: return 0;
    }
}

/* the formats of integer codes under block scales (the int8 products take these) */
static inline int format_quantized(int f) { return format_values(f) > 1; }

static inline int64_t row_bytes(int f, int K) { return (int64_t)(K / format_values(f)) * format_bytes(f); }

ALWAYS_INLINE float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return half_to_float(h);
}

/* Q4_K/Q5_K's 6-bit scale and min of sub-block j (0..7) from their 12 bytes (ggml's
 * get_scale_min_k4) */
ALWAYS_INLINE void kquant_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* one legacy block of 32 values (or a K-quant super-block of 256) into out, exactly */
static void dequantize_block(const uint8_t *b, int f, float *out) {
    switch (f) {
    case W_Q4_0: {
        float d = half_at(b);
        for (int j = 0; j < 16; j++) {
            out[j] = d * (float)((b[2 + j] & 0x0F) - 8);
            out[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case W_Q4_1: {
        float d = half_at(b), m = half_at(b + 2);
        for (int j = 0; j < 16; j++) {
            out[j] = FMA(d, (float)(b[4 + j] & 0x0F), m);
            out[j + 16] = FMA(d, (float)(b[4 + j] >> 4), m);
        }
        break;
    }
    case W_Q5_0: case W_Q5_1: {
        int with_min = f == W_Q5_1, at = with_min ? 4 : 2;
        float d = half_at(b), m = with_min ? half_at(b + 2) : 0.0f;
        uint32_t qh;
        memcpy(&qh, b + at, 4);
        const uint8_t *qs = b + at + 4;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4), hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            if (with_min) {
                out[j] = FMA(d, (float)lo, m);
                out[j + 16] = FMA(d, (float)hi, m);
            } else {
                out[j] = d * (float)(lo - 16);
                out[j + 16] = d * (float)(hi - 16);
            }
        }
        break;
    }
    case W_Q8_0: {
        float d = half_at(b);
        for (int j = 0; j < 32; j++) out[j] = (float)(int8_t)b[2 + j] * d;
        break;
    }
    case W_Q4_K: case W_Q5_K: {
        float d = half_at(b), dmin = half_at(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + (f == W_Q5_K ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kquant_scale_min(scales, j, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m; /* both exact */
            const uint8_t *q = qs + 32 * (j / 2);
            int shift = 4 * (j & 1);
            for (int i = 0; i < 32; i++) {
                int code = (q[i] >> shift) & 0x0F;
                if (f == W_Q5_K) code |= ((qh[i] >> j) & 1) << 4;
                out[32 * j + i] = FMA(dl, (float)code, -ml);
            }
        }
        break;
    }
    case W_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = half_at(b + 208);
        for (int t = 0; t < 8; t++) { /* units of 32: t = 4 h + s */
            int h = t / 4, s = t % 4;
            const uint8_t *l = ql + 64 * h + 32 * (s & 1), *hb = qh + 32 * h;
            int shift = 4 * (s >> 1), hshift = 2 * s;
            for (int half = 0; half < 2; half++) { /* a scale per 16 values */
                float dl = d * (float)sc[2 * t + half];
                for (int i = 16 * half; i < 16 * half + 16; i++) {
                    int code = ((l[i] >> shift) & 0x0F) | (((hb[i] >> hshift) & 3) << 4);
                    out[32 * t + i] = dl * (float)(code - 32);
                }
            }
        }
        break;
    }
    case W_BF16: {
        uint16_t v;
        memcpy(&v, b, 2);
        out[0] = bits_float((uint32_t)v << 16);
        break;
    }
    case W_F16: {
        out[0] = half_at(b);
        break;
    }
    default: /* W_F32 */
        memcpy(out, b, 4);
    }
}

/* a whole row of K values */
static void dequantize_row(const uint8_t *row, int f, int K, float *out) {
    if (f == W_F32) {
        memcpy(out, row, sizeof(float) * (size_t)K);
        return;
    }
    if (f == W_BF16) {
        const uint16_t *h = (const uint16_t *)row;
        for (int k = 0; k < K; k++) out[k] = bits_float((uint32_t)h[k] << 16);
        return;
    }
    if (f == W_F16) {
        const uint16_t *h = (const uint16_t *)row;
        for (int k = 0; k < K; k++) out[k] = half_to_float(h[k]);
        return;
    }
    int values = format_values(f), bytes = format_bytes(f);
    for (int b = 0; b < K / values; b++) dequantize_block(row + (int64_t)b * bytes, f, out + (int64_t)b * values);
}

#endif
