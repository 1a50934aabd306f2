/* Fused CPU kernels of GAT's chunked attention (see dsgraph/seqagg/native.py).
 *
 * Rows are float32, heads x F values each, contiguous; u and v are int64 row and destination
 * ids per edge. Each kernel does in one pass what the torch path does with a gather of the
 * edges' rows, an elementwise product and a sum or an index_add: no edges x (heads * F) tensor
 * is materialized. Kernels with an [x0, x1) range write disjoint outputs per range, so the
 * caller can split them over threads.
 */
#include <stdint.h>

typedef int64_t i64;

/* <a, b> over n values, in 8 independent partial sums (the compiler vectorizes them). */
static inline float dot(const float *a, const float *b, i64 n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    i64 k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) s[l] += a[k + l] * b[k + l];
    float t = 0;
    for (; k < n; k++) t += a[k] * b[k];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;
}

/* out[0:n] += w * x[0:n] */
static inline void axpy(float *out, float w, const float *x, i64 n) {
    for (i64 k = 0; k < n; k++) out[k] += w * x[k];
}

/* dot[e, h] = <rows[u[e], h], gout[v[e], h]> for edges e in [e0, e1). */
void sqa_edge_dots(const float *rows, const float *gout, const i64 *u, const i64 *v,
                   i64 e0, i64 e1, i64 heads, i64 f, float *dots) {
    const i64 w = heads * f;
    for (i64 e = e0; e < e1; e++) {
        const float *a = rows + u[e] * w, *b = gout + v[e] * w;
        for (i64 h = 0; h < heads; h++) dots[e * heads + h] = dot(a + h * f, b + h * f, f);
    }
}

/* acc[v[e], h] += p[e, h] * rows[u[e], h] for every edge (destinations repeat: one thread). */
void sqa_scatter_weighted(const float *rows, const float *p, const i64 *u, const i64 *v,
                          i64 edges, i64 heads, i64 f, float *acc) {
    const i64 w = heads * f;
    for (i64 e = 0; e < edges; e++) {
        const float *a = rows + u[e] * w;
        float *o = acc + v[e] * w;
        for (i64 h = 0; h < heads; h++) axpy(o + h * f, p[e * heads + h], a + h * f, f);
    }
}

/* out[r, h] += sum over row r's edges e (row_ptr, edges sorted by row) of
 * att[e, h] * gout[v[e], h], for rows r in [r0, r1). */
void sqa_gather_weighted(const float *gout, const float *att, const i64 *row_ptr, const i64 *v,
                         i64 r0, i64 r1, i64 heads, i64 f, float *out) {
    const i64 w = heads * f;
    for (i64 r = r0; r < r1; r++) {
        float *o = out + r * w;
        for (i64 e = row_ptr[r]; e < row_ptr[r + 1]; e++) {
            const float *b = gout + v[e] * w;
            for (i64 h = 0; h < heads; h++) axpy(o + h * f, att[e * heads + h], b + h * f, f);
        }
    }
}
