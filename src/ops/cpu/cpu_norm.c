/* CPU reference ops: RMSNorm, and CCA's per-head QK norm + key temperature + partial rotary
 * embedding (rotate-half layout), forward and backward. Sums of squares and dot products run in
 * double; the fp32 steps HF takes (rsqrt, reciprocal of the norm, RoPE angles) are reproduced in
 * fp32 so long positions give the same angles. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>

/* ---- RMSNorm ---- */

/* y[N,C] = (x * rstd) * w with rstd = 1/sqrt(mean(x^2) + eps) saved per row. */
void cpu_rmsnorm_fwd(int nt, float *y, float *rstd, const float *x, const float *w, int N, int C,
                     float eps) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = y + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        rstd[n] = r;
        for (int c = 0; c < C; c++) yr[c] = w[c] * (xr[c] * r);
    }
}

/* dx = r*(w dy) - r^3 x sum(w dy x)/C (overwrite or +=), dw += sum_n dy * x * r. dw is summed
 * first, so dx may alias dy. */
void cpu_rmsnorm_bwd(int nt, float *dx, float *dw, const float *dy, const float *x, const float *w,
                     const float *rstd, int N, int C, int accumulate) {
    int par = (size_t)N * C >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += CPU_COL_BLOCK) {
            int c1 = c0 + CPU_COL_BLOCK < C ? c0 + CPU_COL_BLOCK : C;
            double acc[CPU_COL_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *xr = x + (size_t)n * C, *gr = dy + (size_t)n * C;
                double r = rstd[n];
                for (int c = c0; c < c1; c++) acc[c - c0] += (double)gr[c] * xr[c] * r;
            }
            for (int c = c0; c < c1; c++) dw[c] = (float)((double)dw[c] + acc[c - c0]);
        }
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * C, *gr = dy + (size_t)n * C;
            float *dr = dx + (size_t)n * C;
            double r = rstd[n], dot = 0;
            for (int c = 0; c < C; c++) dot += (double)gr[c] * w[c] * xr[c];
            double k = r * r * r * dot / C;
            if (accumulate) {
                for (int c = 0; c < C; c++) dr[c] += (float)(r * gr[c] * w[c] - k * xr[c]);
            } else {
                for (int c = 0; c < C; c++) dr[c] = (float)(r * gr[c] * w[c] - k * xr[c]);
            }
        }
    }
}

/* ---- QK norm + temperature + partial RoPE ---- */

/* The largest rot/2 handled (stack buffers for the per-row cos/sin). */
#define ROPE_MAX_HALF 1024

/* inv_freq[i] = 1 / theta^(2i/rot) in fp32, as HF's default RoPE init computes it (fp32 exponent,
 * fp32 pow, fp32 reciprocal). glibc powf matches torch's scalar CPU pow bit for bit. */
static void rope_inv_freq(float *inv, int rot, double theta) {
    for (int i = 0; i < rot / 2; i++) {
        float e = (float)(2 * i) / (float)rot;
        inv[i] = 1.0f / powf((float)theta, e);
    }
}

/* cos/sin of the fp32 angle pos * inv_freq[i] (fp32 product, as HF's rotary forward). */
static void rope_cos_sin(float *cs, float *sn, const float *inv, int half, int32_t pos) {
    for (int i = 0; i < half; i++) {
        float a = (float)pos * inv[i];
        cs[i] = cosf(a);
        sn[i] = sinf(a);
    }
}

/* One head: x <- (in * (1/max(||in||,eps) * sqrt(d))) [* temp], then RoPE on x[0,rot) (x may
 * be in). */
static float head_fwd(float *x, const float *in, int d, int half, float sqrtd, float eps,
                      const float *tempj, const float *cs, const float *sn) {
    double ss = 0;
    for (int e = 0; e < d; e++) ss += (double)in[e] * in[e];
    float nrm = (float)sqrt(ss);
    if (nrm < eps) nrm = eps;
    float f = (1.0f / nrm) * sqrtd; /* HF: scale / norm is reciprocal(norm) * scale in fp32 */
    if (tempj) {
        for (int e = 0; e < d; e++) x[e] = (in[e] * f) * *tempj;
    } else {
        for (int e = 0; e < d; e++) x[e] = in[e] * f;
    }
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
    }
    return nrm;
}

/* QK norm, key temperature and partial RoPE of q_in [N,Hq*d] and k_in [N,Hk*d] into q and k
 * (which may be them). */
void cpu_qknorm_rope_fwd(int nt, float *q, float *k, float *qn, float *kn, const float *q_in,
                         const float *k_in, const float *temp, const int32_t *pos, int N, int Hq,
                         int Hk, int d, int rot, double theta, float eps_norm) {
    ZY_CHECKF(rot >= 0 && rot <= d && rot % 2 == 0 && rot / 2 <= ROPE_MAX_HALF,
              "qknorm_rope: rot %d must be even and in [0, d=%d]", rot, d);
    int half = rot / 2;
    float inv[ROPE_MAX_HALF + 1];
    rope_inv_freq(inv, rot, theta);
    float sqrtd = (float)sqrt((double)d);
#pragma omp parallel for num_threads(nt)                                                           \
    schedule(static) if ((size_t)N * (Hq + Hk) * d >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float cs[ROPE_MAX_HALF + 1], sn[ROPE_MAX_HALF + 1];
        rope_cos_sin(cs, sn, inv, half, pos[n]);
        for (int h = 0; h < Hq; h++) {
            size_t o = (size_t)n * Hq * d + (size_t)h * d;
            float nrm = head_fwd(q + o, q_in + o, d, half, sqrtd, eps_norm, NULL, cs, sn);
            if (qn) qn[(size_t)n * Hq + h] = nrm;
        }
        for (int j = 0; j < Hk; j++) {
            size_t o = (size_t)n * Hk * d + (size_t)j * d;
            float nrm = head_fwd(k + o, k_in + o, d, half, sqrtd, eps_norm, &temp[j], cs, sn);
            if (kn) kn[(size_t)n * Hk + j] = nrm;
        }
    }
}

/* One head in place: g (grad of the output) -> grad of the input x. Returns the contribution to
 * dtemp (sum of g_pre_temp * normalised x) when tempj != NULL. */
static double head_bwd(float *g, const float *x, float nrm_saved, int d, int half, float sqrtd,
                       float eps, const float *tempj, const float *cs, const float *sn) {
    /* undo the rotation: the transpose of [[c, -s], [s, c]] */
    for (int i = 0; i < half; i++) {
        float a = g[i], b = g[i + half];
        g[i] = a * cs[i] + b * sn[i];
        g[i + half] = b * cs[i] - a * sn[i];
    }
    double f = (double)((1.0f / nrm_saved) * sqrtd), t = tempj ? (double)*tempj : 1.0;
    double dtemp = 0, ss = 0, dot = 0;
    for (int e = 0; e < d; e++) {
        dtemp += (double)g[e] * x[e] * f;
        ss += (double)x[e] * x[e];
        dot += (double)g[e] * x[e];
    }
    double raw = sqrt(ss);
    if (raw >= eps) {
        /* y = s x / ||x||: dx = (s/||x||) (g - x (x.g)/||x||^2) */
        double a = sqrtd * t / raw, b = dot / ss;
        for (int e = 0; e < d; e++) g[e] = (float)(a * (g[e] - b * x[e]));
    } else {
        /* the clamp is active: the norm is the constant eps */
        double a = sqrtd * t / eps;
        for (int e = 0; e < d; e++) g[e] = (float)(a * g[e]);
    }
    return dtemp;
}

/* Backward of cpu_qknorm_rope_fwd, in place on dq, dk; dtemp += per key head. */
void cpu_qknorm_rope_bwd(int nt, float *dq, float *dk, float *dtemp, const float *q_in,
                         const float *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm) {
    ZY_CHECKF(rot >= 0 && rot <= d && rot % 2 == 0 && rot / 2 <= ROPE_MAX_HALF,
              "qknorm_rope: rot %d must be even and in [0, d=%d]", rot, d);
    int half = rot / 2;
    float inv[ROPE_MAX_HALF + 1];
    rope_inv_freq(inv, rot, theta);
    float sqrtd = (float)sqrt((double)d);
    int nchunk = (N + CPU_ROW_CHUNK - 1) / CPU_ROW_CHUNK;
    /* dtemp partials per fixed row chunk, added in chunk order: independent of the thread count */
    double *part = zy_calloc((size_t)nchunk * (Hk > 0 ? Hk : 1), sizeof(double));
#pragma omp parallel for num_threads(nt)                                                           \
    schedule(static) if ((size_t)N * (Hq + Hk) * d >= CPU_PAR_MIN)
    for (int ch = 0; ch < nchunk; ch++) {
        float cs[ROPE_MAX_HALF + 1], sn[ROPE_MAX_HALF + 1];
        int n1 = (ch + 1) * CPU_ROW_CHUNK < N ? (ch + 1) * CPU_ROW_CHUNK : N;
        for (int n = ch * CPU_ROW_CHUNK; n < n1; n++) {
            rope_cos_sin(cs, sn, inv, half, pos[n]);
            for (int h = 0; h < Hq; h++) {
                size_t o = (size_t)n * Hq * d + (size_t)h * d;
                head_bwd(dq + o, q_in + o, qn[(size_t)n * Hq + h], d, half, sqrtd, eps_norm, NULL,
                         cs, sn);
            }
            for (int j = 0; j < Hk; j++) {
                size_t o = (size_t)n * Hk * d + (size_t)j * d;
                part[(size_t)ch * Hk + j] += head_bwd(dk + o, k_in + o, kn[(size_t)n * Hk + j], d,
                                                      half, sqrtd, eps_norm, &temp[j], cs, sn);
            }
        }
    }
    for (int j = 0; j < Hk; j++) {
        double s = 0;
        for (int ch = 0; ch < nchunk; ch++) s += part[(size_t)ch * Hk + j];
        dtemp[j] = (float)((double)dtemp[j] + s);
    }
    free(part);
}
