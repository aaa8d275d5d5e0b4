/* CPU reference ops: causal grouped-query softmax attention with an optional sliding window
 * (query t sees keys s with t - window < s <= t, HF's sliding_window_overlay), forward, backward
 * (probabilities recomputed from the saved log-sum-exp) and single-row decoding. Training passes
 * work on blocks of queries with sgemm (fp32 dot products, as HF computes them); softmax sums and
 * the backward's row sums are double. Decoding is a direct double loop. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* First key visible to query t. */
static inline int key_lo(int t, int window) {
    return (window > 0 && t - window + 1 > 0) ? t - window + 1 : 0;
}

/* Softmax attention of one query row over keys [lo, hi] (rows of k/v with stride ks), written to
 * o[d]; returns the log-sum-exp of the scaled scores. sc is scratch for hi+1 doubles. */
static double attend_row(float *o, const float *qr, const float *k, const float *v, size_t ks,
                         int lo, int hi, int d, float scale, double *sc, double *acc) {
    double mx = -INFINITY;
    for (int s = lo; s <= hi; s++) {
        const float *kr = k + (size_t)s * ks;
        double dot = 0;
        for (int e = 0; e < d; e++) dot += (double)qr[e] * kr[e];
        sc[s] = dot * scale;
        if (sc[s] > mx) mx = sc[s];
    }
    double sum = 0;
    memset(acc, 0, (size_t)d * sizeof(double));
    for (int s = lo; s <= hi; s++) {
        double p = exp(sc[s] - mx);
        sum += p;
        const float *vr = v + (size_t)s * ks;
        for (int e = 0; e < d; e++) acc[e] += p * vr[e];
    }
    for (int e = 0; e < d; e++) o[e] = (float)(acc[e] / sum);
    return mx + log(sum);
}

/* Query rows per block: scores of a block of queries against the keys it can see are one sgemm. */
#define ATT_QB 64

/* Keys [klo, khi] seen by the query block [r0, r1). */
static inline void block_keys(int r0, int r1, int window, int *klo, int *nk) {
    *klo = key_lo(r0, window);
    *nk = r1 - *klo;
}

/* out[N,Hq*d] and lse[B,Hq,T]; one (sequence, query head) per task. Per block of queries:
 * S = Q K^T (sgemm, fp32 dot products of length d, as HF's eager path), softmax of scale * S over
 * each row's visible keys in double, then O = P V (sgemm). */
void cpu_attention_fwd(int nt, float *out, float *lse, const float *q, const float *k,
                       const float *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window) {
    ZY_CHECK(Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && T >= 0 && B >= 0);
    int G = Hq / Hk, qs = Hq * d, ks = Hk * d;
    int par = (size_t)B * Hq * T * T * d >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
        float *S = zy_malloc(((size_t)ATT_QB * T + 1) * sizeof(float));
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < Hq; i++) {
                int j = i / G;
                const float *qb = q + (size_t)b * T * qs + (size_t)i * d;
                const float *kb = k + (size_t)b * T * ks + (size_t)j * d;
                const float *vb = v + (size_t)b * T * ks + (size_t)j * d;
                float *ob = out + (size_t)b * T * qs + (size_t)i * d;
                float *lb = lse + ((size_t)b * Hq + i) * T;
                for (int r0 = 0; r0 < T; r0 += ATT_QB) {
                    int r1 = r0 + ATT_QB < T ? r0 + ATT_QB : T, nr = r1 - r0, klo, nk;
                    block_keys(r0, r1, window, &klo, &nk);
                    cpu_sgemm(0, 1, nr, nk, d, qb + (size_t)r0 * qs, qs, kb + (size_t)klo * ks, ks,
                              0.0f, S, nk);
                    for (int t = r0; t < r1; t++) {
                        float *sr = S + (size_t)(t - r0) * nk;
                        int lo = key_lo(t, window) - klo, hi = t - klo;
                        double mx = -INFINITY, sum = 0;
                        for (int s = lo; s <= hi; s++)
                            if ((double)sr[s] * scale > mx) mx = (double)sr[s] * scale;
                        for (int s = lo; s <= hi; s++) {
                            double e = exp((double)sr[s] * scale - mx);
                            sum += e;
                            sr[s] = (float)e;
                        }
                        double inv = 1.0 / sum;
                        for (int s = 0; s < nk; s++)
                            sr[s] = (s >= lo && s <= hi) ? (float)(sr[s] * inv) : 0.0f;
                        lb[t] = (float)(mx + log(sum));
                    }
                    cpu_sgemm(0, 0, nr, d, nk, S, nk, vb + (size_t)klo * ks, ks, 0.0f,
                              ob + (size_t)r0 * qs, qs);
                }
            }
        }
        free(S);
    }
}

/* dq, dk, dv (overwrite). One (sequence, key head) per task, so the task owns dk/dv of its key
 * head and dq of the G query heads that share it. Per block of queries: P = exp(scale Q K^T - lse)
 * recomputed, dP = dO V^T, dS = P (dP - rowsum(P dP)) scale, then dQ = dS K, dK += dS^T Q,
 * dV += P^T dO (sgemms; the row sums in double). */
void cpu_attention_bwd(int nt, float *dq, float *dk, float *dv, const float *dout, const float *out,
                       const float *lse, const float *q, const float *k, const float *v, int B,
                       int T, int Hq, int Hk, int d, float scale, int window) {
    ZY_CHECK(Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && T >= 0 && B >= 0);
    int G = Hq / Hk, qs = Hq * d, ks = Hk * d;
    int par = (size_t)B * Hq * T * T * d >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
        float *Pm = zy_malloc(((size_t)ATT_QB * T + 1) * sizeof(float));
        float *dP = zy_malloc(((size_t)ATT_QB * T + 1) * sizeof(float));
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int j = 0; j < Hk; j++) {
                const float *kb = k + (size_t)b * T * ks + (size_t)j * d;
                const float *vb = v + (size_t)b * T * ks + (size_t)j * d;
                float *dkb = dk + (size_t)b * T * ks + (size_t)j * d;
                float *dvb = dv + (size_t)b * T * ks + (size_t)j * d;
                for (int s = 0; s < T; s++) {
                    memset(dkb + (size_t)s * ks, 0, (size_t)d * sizeof(float));
                    memset(dvb + (size_t)s * ks, 0, (size_t)d * sizeof(float));
                }
                for (int i = j * G; i < (j + 1) * G; i++) {
                    const float *qb = q + (size_t)b * T * qs + (size_t)i * d;
                    const float *gb = dout + (size_t)b * T * qs + (size_t)i * d;
                    float *dqb = dq + (size_t)b * T * qs + (size_t)i * d;
                    const float *lb = lse + ((size_t)b * Hq + i) * T;
                    for (int r0 = 0; r0 < T; r0 += ATT_QB) {
                        int r1 = r0 + ATT_QB < T ? r0 + ATT_QB : T, nr = r1 - r0, klo, nk;
                        block_keys(r0, r1, window, &klo, &nk);
                        const float *kk = kb + (size_t)klo * ks, *vv = vb + (size_t)klo * ks;
                        const float *qq = qb + (size_t)r0 * qs, *gg = gb + (size_t)r0 * qs;
                        cpu_sgemm(0, 1, nr, nk, d, qq, qs, kk, ks, 0.0f, Pm, nk);
                        cpu_sgemm(0, 1, nr, nk, d, gg, qs, vv, ks, 0.0f, dP, nk);
                        for (int t = r0; t < r1; t++) {
                            float *pr = Pm + (size_t)(t - r0) * nk,
                                  *gr = dP + (size_t)(t - r0) * nk;
                            int lo = key_lo(t, window) - klo, hi = t - klo;
                            double l = lb[t], dsum = 0;
                            for (int s = 0; s < nk; s++) {
                                pr[s] = (s >= lo && s <= hi) ? (float)exp((double)pr[s] * scale - l)
                                                             : 0.0f;
                                dsum += (double)pr[s] * gr[s];
                            }
                            for (int s = 0; s < nk; s++)
                                gr[s] = (float)((double)pr[s] * ((double)gr[s] - dsum) * scale);
                        }
                        cpu_sgemm(0, 0, nr, d, nk, dP, nk, kk, ks, 0.0f, dqb + (size_t)r0 * qs, qs);
                        cpu_sgemm(1, 0, nk, d, nr, dP, nk, qq, qs, 1.0f, dkb + (size_t)klo * ks,
                                  ks);
                        cpu_sgemm(1, 0, nk, d, nr, Pm, nk, gg, qs, 1.0f, dvb + (size_t)klo * ks,
                                  ks);
                    }
                }
            }
        }
        free(Pm);
        free(dP);
    }
}

/* out[B,Hq*d]: the query of sequence b sits at position Tk-1 and sees cache rows
 * [max(0, Tk-window), Tk) (all Tk rows when window <= 0). */
void cpu_attention_decode(int nt, float *out, const float *q, const float *kc, const float *vc,
                          int B, int Tk, int Tmax, int Hq, int Hk, int d, float scale, int window) {
    ZY_CHECK(Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && Tk >= 1 && Tk <= Tmax);
    int G = Hq / Hk;
    size_t qs = (size_t)Hq * d, ks = (size_t)Hk * d;
    int par = (size_t)B * Hq * Tk * d >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
        double *sc = zy_malloc(((size_t)Tk + 1) * sizeof(double));
        double *acc = zy_malloc((size_t)d * sizeof(double));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < Hq; i++) {
                const float *kb = kc + (size_t)b * Tmax * ks + (size_t)(i / G) * d;
                const float *vb = vc + (size_t)b * Tmax * ks + (size_t)(i / G) * d;
                attend_row(out + (size_t)b * qs + (size_t)i * d, q + (size_t)b * qs + (size_t)i * d,
                           kb, vb, ks, key_lo(Tk - 1, window), Tk - 1, d, scale, sc, acc);
            }
        }
        free(sc);
        free(acc);
    }
}
