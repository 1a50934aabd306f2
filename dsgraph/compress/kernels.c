/* Fused CPU kernels of the activation-compression codec (see dsgraph/compress/native.py).
 *
 * One pass per block: min/max, statistics rounded to bf16/fp16 exactly as codec.round_stats does
 * (minimum down, range up, so every value lies inside the stored range), counter-based
 * stochastic rounding, clamp and bit packing (first code in the low bits, codes of the whole
 * tensor in one flat stream, as codec.pack_codes). The matching dequantization and 1-bit mask
 * pack/unpack. Every function works on a range of blocks (or bytes), so the caller can split a
 * tensor over threads; results do not depend on the split because the random number of element
 * i is a hash of (seed, i).
 */
#include <stdint.h>
#include <string.h>
#include <float.h>

typedef int64_t i64;

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- statistics dtypes: bf16 and fp16 as raw 16-bit patterns ---- */

static inline float bf16_to_f(uint16_t h) { return u2f((uint32_t)h << 16); }

/* fp32 -> bf16 rounded down (towards -inf) or up (towards +inf): truncate, then step one ulp
 * away from zero where truncation moved the value the wrong way (codec._round_bf16). */
static inline uint16_t f_to_bf16_dir(float x, int down) {
    uint32_t b = f2u(x);
    uint32_t kept = b & 0xFFFF0000u;
    int inexact = (b & 0xFFFFu) != 0;
    int away = inexact && (down ? (x < 0) : (x > 0));
    return (uint16_t)((kept + (away ? 0x10000u : 0u)) >> 16);
}

static inline float h_to_f(uint16_t h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t f_to_h(float x) { _Float16 v = (_Float16)x; uint16_t h; memcpy(&h, &v, 2); return h; }

/* nextafter of a 16-bit float pattern (bf16 or fp16: both sign-magnitude) towards +-inf. */
static inline uint16_t next16(uint16_t h, int up) {
    if ((h & 0x7FFFu) == 0) return up ? 0x0001u : 0x8001u;
    int neg = (h & 0x8000u) != 0;
    return (uint16_t)((neg != up) ? h + 1 : h - 1);
}

static inline float s_to_f(uint16_t h, int fp16) { return fp16 ? h_to_f(h) : bf16_to_f(h); }

/* Block minimum rounded down, range rounded up (codec.round_stats). */
static inline void round_stats(float mn, float mx, int fp16, uint16_t *mn_s, uint16_t *r_s) {
    uint16_t m, r;
    if (!fp16) {
        m = f_to_bf16_dir(mn, 1);
        r = f_to_bf16_dir(mx - bf16_to_f(m), 0);
    } else {
        m = f_to_h(mn);
        if (h_to_f(m) > mn) m = next16(m, 0);
        float rr = mx - h_to_f(m);
        r = f_to_h(rr);
        if (h_to_f(r) < rr) r = next16(r, 1);
    }
    for (int k = 0; k < 2; k++)  /* fp32 rounding of mn + rng may still fall an ulp short of mx */
        if (s_to_f(m, fp16) + s_to_f(r, fp16) < mx) r = next16(r, 1);
    *mn_s = m;
    *r_s = r;
}

/* ---- counter-based random numbers: a keyed 32-bit integer hash of the element index ---- */

static inline uint32_t hash32(uint32_t i, uint32_t k1, uint32_t k2) {
    uint32_t x = i * 0x9E3779B9u ^ k1;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= k2;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

/* Write m codes (one per byte in t) into the packed stream at element index `start`: codes
 * sharing a byte with a neighbouring range are OR-ed in (the caller zeroed the stream). */
static inline void put_codes(uint8_t *codes, i64 start, const uint8_t *t, i64 m, int bits) {
    const int per = 8 / bits;
    i64 j = 0;
    for (; j < m && ((start + j) % per) != 0; j++)
        codes[(start + j) / per] |= (uint8_t)(t[j] << (bits * ((start + j) % per)));
    i64 nbytes = (m - j) / per;
    uint8_t *out = codes + (start + j) / per;
    const uint8_t *v = t + j;
    switch (bits) {  /* constant shifts per case so each loop vectorizes */
    case 1:
        for (i64 q = 0; q < nbytes; q++)
            out[q] = (uint8_t)(v[8 * q] | v[8 * q + 1] << 1 | v[8 * q + 2] << 2 | v[8 * q + 3] << 3 |
                               v[8 * q + 4] << 4 | v[8 * q + 5] << 5 | v[8 * q + 6] << 6 | v[8 * q + 7] << 7);
        break;
    case 2:
        for (i64 q = 0; q < nbytes; q++)
            out[q] = (uint8_t)(v[4 * q] | v[4 * q + 1] << 2 | v[4 * q + 2] << 4 | v[4 * q + 3] << 6);
        break;
    case 4:
        for (i64 q = 0; q < nbytes; q++) out[q] = (uint8_t)(v[2 * q] | v[2 * q + 1] << 4);
        break;
    default:
        memcpy(out, v, (size_t)nbytes);
    }
    j += nbytes * per;
    for (; j < m; j++)
        codes[(start + j) / per] |= (uint8_t)(t[j] << (bits * ((start + j) % per)));
}

#define CHUNK 2048
#define LANES 16

/* Quantize blocks [b0, b1) of x (n values, blocks of `group`, the last one may be short).
 * levels: NULL for the uniform grid 0..top, else top + 1 increasing normalised levels from 0 to
 * top (i-EXACT's non-uniform INT2 levels): a value is rounded between the two levels around it
 * with probabilities that keep it unbiased. codes: the packed stream of the whole tensor, zeroed
 * by the caller; mn/rng: 16-bit statistics per block. */
void dsq_quantize(const float *x, i64 n, i64 group, int bits, int fp16, const float *levels,
                  uint64_t seed, i64 b0, i64 b1, uint8_t *codes, uint16_t *mn_out, uint16_t *rng_out) {
    const int top = (1 << bits) - 1;
    const uint32_t k1 = (uint32_t)seed, k2base = (uint32_t)(seed >> 32);
    uint8_t t[CHUNK];
    for (i64 b = b0; b < b1; b++) {
        i64 s = b * group, e = s + group < n ? s + group : n;
        const float *xb = x + s;
        i64 len = e - s;
        /* Lane-wise min/max (vectorizes without fast-math), then a reduction over the lanes. */
        float lmn[LANES], lmx[LANES];
        for (int k = 0; k < LANES; k++) lmn[k] = lmx[k] = xb[0];
        i64 j = 0;
        for (; j + LANES <= len; j += LANES)
            for (int k = 0; k < LANES; k++) {
                float v = xb[j + k];
                lmn[k] = v < lmn[k] ? v : lmn[k];
                lmx[k] = v > lmx[k] ? v : lmx[k];
            }
        float mn = lmn[0], mx = lmx[0];
        for (int k = 1; k < LANES; k++) {
            mn = lmn[k] < mn ? lmn[k] : mn;
            mx = lmx[k] > mx ? lmx[k] : mx;
        }
        for (; j < len; j++) {
            mn = xb[j] < mn ? xb[j] : mn;
            mx = xb[j] > mx ? xb[j] : mx;
        }
        uint16_t ms, rs;
        round_stats(mn, mx, fp16, &ms, &rs);
        mn_out[b] = ms;
        rng_out[b] = rs;
        const float mnf = s_to_f(ms, fp16), rf = s_to_f(rs, fp16);
        /* Constant blocks have range 0: scale 0 maps every value to code 0 (= mn), no inf/NaN. */
        const float inv = rf > 0 ? (float)top / (rf > FLT_MIN ? rf : FLT_MIN) : 0.0f;
        const uint32_t k2 = k2base ^ (uint32_t)((uint64_t)s >> 32) * 0x85EBCA6Bu;
        for (i64 c0 = s; c0 < e; c0 += CHUNK) {
            i64 m = e - c0 < CHUNK ? e - c0 : CHUNK;
            const float *xc = x + c0;
            const uint32_t i0 = (uint32_t)c0;
            if (levels == NULL) {
                /* code = floor((x - mn) / step + u), u uniform in (0, 1) from 24 hash bits. */
                for (i64 q = 0; q < m; q++) {
                    float u = (float)(hash32(i0 + (uint32_t)q, k1, k2) >> 8) * 0x1p-24f + 0x1p-25f;
                    int c = (int)((xc[q] - mnf) * inv + u);
                    t[q] = (uint8_t)(c > top ? top : c);
                }
            } else {
                /* bin k = number of inner levels <= s; round up with probability (s - l_k) / width. */
                for (i64 q = 0; q < m; q++) {
                    float u = (float)(hash32(i0 + (uint32_t)q, k1, k2) >> 8) * 0x1p-24f + 0x1p-25f;
                    float sv = (xc[q] - mnf) * inv;
                    int k = 0;
                    for (int j = 1; j < top; j++) k += sv >= levels[j];
                    float lo = levels[k], w = levels[k + 1] - levels[k];
                    int c = k + (u < (sv - lo) / w);
                    t[q] = (uint8_t)(c > top ? top : c);
                }
            }
            put_codes(codes, c0, t, m, bits);
        }
    }
}

/* Dequantize blocks [b0, b1): out[i] = mn + value(code) * (rng / top), value(c) = c or levels[c]. */
void dsq_dequantize(const uint8_t *codes, i64 n, i64 group, int bits, int fp16, const float *levels,
                    const uint16_t *mn_in, const uint16_t *rng_in, i64 b0, i64 b1, float *out) {
    const int top = (1 << bits) - 1;
    const int per = 8 / bits;
    float table[256];
    for (int c = 0; c <= top; c++) table[c] = levels ? levels[c] : (float)c;
    for (i64 b = b0; b < b1; b++) {
        i64 s = b * group, e = s + group < n ? s + group : n;
        const float mnf = s_to_f(mn_in[b], fp16);
        const float step = s_to_f(rng_in[b], fp16) / (float)top;
        i64 i = s;
        for (; i < e && (i % per) != 0; i++)
            out[i] = mnf + table[(codes[i / per] >> (bits * (i % per))) & top] * step;
        i64 nbytes = (e - i) / per;
        const uint8_t *in = codes + i / per;
        float *o = out + i;
        for (i64 q = 0; q < nbytes; q++) {
            uint32_t byte = in[q];
            for (int k = 0; k < per; k++)
                o[q * per + k] = mnf + table[(byte >> (bits * k)) & top] * step;
        }
        i += nbytes * per;
        for (; i < e; i++)
            out[i] = mnf + table[(codes[i / per] >> (bits * (i % per))) & top] * step;
    }
}

/* 1-bit mask of x > 0 for values [8 * q0, min(8 * q1, n)) into bytes [q0, q1). */
void dsq_pack_positive(const float *x, i64 n, i64 q0, i64 q1, uint8_t *out) {
    for (i64 q = q0; q < q1; q++) {
        i64 s = q * 8;
        uint32_t byte = 0;
        if (s + 8 <= n) {
            for (int k = 0; k < 8; k++) byte |= (uint32_t)(x[s + k] > 0) << k;
        } else {
            for (i64 k = 0; s + k < n; k++) byte |= (uint32_t)(x[s + k] > 0) << k;
        }
        out[q] = (uint8_t)byte;
    }
}

/* 1-bit mask of x != 0 for bytes [q0, q1); returns 1 if every nonzero value equals the first
 * nonzero one (written to *value, 0 if there is none), else 0 (the caller then keeps x). */
int dsq_pack_nonzero(const float *x, i64 n, i64 q0, i64 q1, uint8_t *out, float *value) {
    i64 s0 = q0 * 8, s1 = q1 * 8 < n ? q1 * 8 : n;
    uint32_t c = 0;  /* bit pattern of the common nonzero value; 0 = none */
    for (i64 i = s0; i < s1; i++)
        if (x[i] != 0.0f) { c = f2u(x[i]); break; }
    uint32_t bad = 0;
    i64 q = q0;
    for (; q < q1 && q * 8 + 8 <= n; q++) {
        const float *xv = x + q * 8;
        uint32_t byte = 0;
        for (int k = 0; k < 8; k++) {
            uint32_t nz = xv[k] != 0.0f;
            byte |= nz << k;
            bad |= nz & (f2u(xv[k]) != c);
        }
        out[q] = (uint8_t)byte;
    }
    for (; q < q1; q++) {
        uint32_t byte = 0;
        for (i64 k = 0; q * 8 + k < n; k++) {
            uint32_t nz = x[q * 8 + k] != 0.0f;
            byte |= nz << k;
            bad |= nz & (f2u(x[q * 8 + k]) != c);
        }
        out[q] = (uint8_t)byte;
    }
    *value = u2f(c);
    return !bad;
}

/* Values [8 * q0, min(8 * q1, n)) of a 1-bit mask: value where the bit is set, 0 elsewhere. */
void dsq_unpack_mask(const uint8_t *bits, i64 n, i64 q0, i64 q1, float value, float *out) {
    const uint32_t v = f2u(value);
    i64 q = q0;
    for (; q < q1 && q * 8 + 8 <= n; q++) {
        uint32_t byte = bits[q];
        float *o = out + q * 8;
        for (int k = 0; k < 8; k++) o[k] = u2f(-((byte >> k) & 1u) & v);
    }
    for (; q < q1; q++)
        for (i64 k = 0; q * 8 + k < n; k++) out[q * 8 + k] = u2f(-((bits[q] >> k) & 1u) & v);
}

/* ---- fused ReLU and dropout that keep a 1-bit mask instead of a float tensor ---- */

/* out = max(x, 0) and bits of x > 0, for values [8 * q0, min(8 * q1, n)). */
void dsq_relu_bits(const float *x, i64 n, i64 q0, i64 q1, float *out, uint8_t *bits) {
    for (i64 q = q0; q < q1; q++) {
        i64 s = q * 8, e = s + 8 < n ? s + 8 : n;
        uint32_t byte = 0;
        for (i64 i = s; i < e; i++) {
            uint32_t keep = x[i] > 0.0f;
            byte |= keep << (i - s);
            out[i] = keep ? x[i] : 0.0f;
        }
        bits[q] = (uint8_t)byte;
    }
}

/* Inverted dropout: value i is kept when a keyed hash of (seed, i) is >= threshold
 * (threshold = p * 2^32, so P(keep) = 1 - p to within 2^-32); kept values are scaled by
 * `scale`. Writes out and the keep bits for values [8 * q0, min(8 * q1, n)). */
void dsq_dropout_bits(const float *x, i64 n, i64 q0, i64 q1, uint64_t seed, uint32_t threshold,
                      float scale, float *out, uint8_t *bits) {
    const uint32_t k1 = (uint32_t)seed, k2 = (uint32_t)(seed >> 32);
    for (i64 q = q0; q < q1; q++) {
        i64 s = q * 8, e = s + 8 < n ? s + 8 : n;
        uint32_t byte = 0;
        for (i64 i = s; i < e; i++) {
            /* The index's high half goes into the key so tensors beyond 2^32 values stay random. */
            uint32_t keep = hash32((uint32_t)i, k1, k2 ^ (uint32_t)((uint64_t)i >> 32)) >= threshold;
            byte |= keep << (i - s);
            out[i] = keep ? x[i] * scale : 0.0f;
        }
        bits[q] = (uint8_t)byte;
    }
}

/* Backward of both: out = g * scale where the bit is set, 0 elsewhere. */
void dsq_mask_mul(const float *g, const uint8_t *bits, i64 n, i64 q0, i64 q1, float scale,
                  float *out) {
    for (i64 q = q0; q < q1; q++) {
        i64 s = q * 8, e = s + 8 < n ? s + 8 : n;
        uint32_t byte = bits[q];
        for (i64 i = s; i < e; i++)
            out[i] = ((byte >> (i - s)) & 1u) ? g[i] * scale : 0.0f;
    }
}
