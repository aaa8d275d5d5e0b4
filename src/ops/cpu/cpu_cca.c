/* CPU reference ops for CCA's projection path: the two causal convolutions over time on the packed
 * [q0 | k0] channels (depthwise kernel t0, then grouped per head kernel t1) plus the mean
 * residuals, and the delayed half of the values. Forward and backward. The backward runs one head
 * group per task (a group's weights and channels belong to it alone), so parameter gradients are
 * summed in a fixed order without atomics. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* Row r of sequence b's left-padded input: P padding rows (state rows, or NULL for zeros), then
 * qk0's T rows. */
static inline const float *xpad_row(const float *qk0, const float *state, int b, int r, int T,
                                    int P, int C) {
    if (r >= P) return qk0 + ((size_t)b * T + (r - P)) * C;
    return state ? state + ((size_t)b * P + r) * C : NULL;
}

/* The grouped weight w2 [C, d, t1] repacked per tap: wt[j][c][i] = w2[c, i, j], so that tap j of
 * head group g is a contiguous [d (out), d (in)] block for sgemm. */
static float *pack_w2(const float *w2, int C, int d, int t1) {
    float *wt = zy_malloc((size_t)t1 * C * d * sizeof(float) + 1);
    for (int j = 0; j < t1; j++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < d; i++)
                wt[((size_t)j * C + c) * d + i] = w2[((size_t)c * d + i) * t1 + j];
    return wt;
}

/* q, k from qk0: depthwise conv (saved to mid), grouped conv, plus the mean residuals. The grouped
 * conv of head group g is, per tap j, an sgemm of mid rows [t+j, g*d .. g*d+d) with that tap's
 * [d, d] weight block (fp32 accumulation over d*t1 terms, like the conv HF runs). */
void cpu_cca_conv_fwd(int nt, float *q, float *k, float *mid_save, const float *qk0,
                      const float *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1) {
    ZY_CHECK(B >= 0 && T >= 0 && Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && t0 >= 1 &&
             t1 >= 1);
    int C = (Hq + Hk) * d, P = (t0 - 1) + (t1 - 1), Tm = T + t1 - 1, G = Hq / Hk;
    int Qd = Hq * d, Kd = Hk * d, NG = Hq + Hk;
    float *mid = mid_save ? mid_save : zy_malloc((size_t)B * Tm * C * sizeof(float) + 1);
    float *wt = pack_w2(w2, C, d, t1);
    int par = (size_t)B * T * C * (t0 + d * t1) >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
        /* mid[b,t,c] = b1[c] + sum_j w1[c,j] xpad[b, t+j, c] */
#pragma omp for schedule(static)
        for (int bt = 0; bt < B * Tm; bt++) {
            int b = bt / Tm, t = bt % Tm;
            float *mr = mid + (size_t)bt * C;
            for (int c = 0; c < C; c++) {
                double s = b1[c];
                for (int j = 0; j < t0; j++) {
                    const float *xr = xpad_row(qk0, state, b, t + j, T, P, C);
                    if (xr) s += (double)w1[(size_t)c * t0 + j] * xr[c];
                }
                mr[c] = (float)s;
            }
        }
        /* conv[b, t, g-block] = sum_j mid[b, t+j, g-block] W_j,g^T, written into q or k */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int g = 0; g < NG; g++) {
                float *out = g < Hq ? q + (size_t)b * T * Qd + (size_t)g * d
                                    : k + (size_t)b * T * Kd + (size_t)(g - Hq) * d;
                int ldo = g < Hq ? Qd : Kd;
                for (int j = 0; j < t1; j++)
                    cpu_sgemm(0, 1, T, d, d, mid + ((size_t)b * Tm + j) * C + (size_t)g * d, C,
                              wt + ((size_t)j * C + (size_t)g * d) * d, d, j ? 1.0f : 0.0f, out,
                              ldo);
            }
        }
        /* + b2, then qr_i = (q0_i + k0_{i/G}) * 0.5 and kr_j = (sum over group j of qr_i) / G
         * (fp32, HF's order) */
#pragma omp for schedule(static)
        for (int n = 0; n < B * T; n++) {
            const float *q0 = qk0 + (size_t)n * C, *k0 = q0 + Qd;
            float *qr = q + (size_t)n * Qd, *kr = k + (size_t)n * Kd;
            for (int c = 0; c < Qd; c++) qr[c] += b2[c];
            for (int c = 0; c < Kd; c++) kr[c] += b2[Qd + c];
            for (int j = 0; j < Hk; j++) {
                for (int e = 0; e < d; e++) {
                    float sum = 0.0f;
                    for (int gi = 0; gi < G; gi++) {
                        int i = j * G + gi;
                        float res = (q0[(size_t)i * d + e] + k0[(size_t)j * d + e]) * 0.5f;
                        qr[(size_t)i * d + e] += res;
                        sum += res;
                    }
                    kr[(size_t)j * d + e] += sum / (float)G;
                }
            }
        }
    }
    free(wt);
    if (!mid_save) free(mid);
}

/* Backward of cpu_cca_conv_fwd: dqk0 (overwrite), dw1/db1/dw2/db2 (+=). Padding rows are zeros.
 * One head group per task: dmid of a sequence and dw2 of a sequence are sgemms with the group's
 * blocks; sums over sequences and all bias / depthwise sums run in double. */
void cpu_cca_conv_bwd(int nt, float *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const float *dq, const float *dk, const float *qk0, const float *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1) {
    ZY_CHECK(B >= 0 && T >= 0 && Hq >= 1 && Hk >= 1 && Hq % Hk == 0 && d >= 1 && t0 >= 1 &&
             t1 >= 1);
    ZY_CHECKF(mid_save != NULL, "cca_conv_bwd needs the forward's mid_save");
    int C = (Hq + Hk) * d, P = (t0 - 1) + (t1 - 1), Tm = T + t1 - 1, G = Hq / Hk;
    int Qd = Hq * d, Kd = Hk * d, NG = Hq + Hk;
    float *wt = pack_w2(w2, C, d, t1);
    int par = (size_t)B * T * C * (t0 + d * t1) >= CPU_PAR_MIN;
#pragma omp parallel num_threads(nt) if (par)
    {
        /* per-thread scratch: dmid of one sequence and group, and the group's weight sums */
        float *dmid = zy_malloc(((size_t)Tm * d + 1) * sizeof(float));
        float *tw = zy_malloc(((size_t)d * d + 1) * sizeof(float));
        double *aw2 = zy_malloc(((size_t)t1 * d * d) * sizeof(double));
        double *aw1 = zy_malloc(((size_t)d * t0) * sizeof(double));
        double *ab1 = zy_malloc((size_t)d * sizeof(double));
        double *ab2 = zy_malloc((size_t)d * sizeof(double));
#pragma omp for schedule(dynamic, 1)
        for (int g = 0; g < NG; g++) {
            int c0 = g * d;
            memset(aw2, 0, (size_t)t1 * d * d * sizeof(double));
            memset(aw1, 0, (size_t)d * t0 * sizeof(double));
            memset(ab1, 0, (size_t)d * sizeof(double));
            memset(ab2, 0, (size_t)d * sizeof(double));
            for (int b = 0; b < B; b++) {
                const float *gc = g < Hq ? dq + (size_t)b * T * Qd + (size_t)g * d
                                         : dk + (size_t)b * T * Kd + (size_t)(g - Hq) * d;
                int ldg = g < Hq ? Qd : Kd;
                const float *mid = mid_save + (size_t)b * Tm * C + c0;
                for (int t = 0; t < T; t++)
                    for (int cl = 0; cl < d; cl++) ab2[cl] += gc[(size_t)t * ldg + cl];
                /* grouped conv: dmid[t+j] += dconv[t] W_j ; dW_j += dconv^T mid[t+j] */
                memset(dmid, 0, (size_t)Tm * d * sizeof(float));
                for (int j = 0; j < t1; j++) {
                    const float *wj = wt + ((size_t)j * C + c0) * d;
                    cpu_sgemm(0, 0, T, d, d, gc, ldg, wj, d, 1.0f, dmid + (size_t)j * d, d);
                    cpu_sgemm(1, 0, d, d, T, gc, ldg, mid + (size_t)j * C, C, 0.0f, tw, d);
                    double *awj = aw2 + (size_t)j * d * d;
                    for (size_t ci = 0; ci < (size_t)d * d; ci++) awj[ci] += tw[ci];
                }
                /* depthwise conv: db1 += dmid; dw1[c,j] += dmid[t,c] xpad[t+j,c];
                 * dqk0[r-P, c] = sum_j dmid[r-j, c] w1[c,j] for the qk0 rows r >= P */
                for (int t = 0; t < Tm; t++) {
                    const float *dm = dmid + (size_t)t * d;
                    for (int cl = 0; cl < d; cl++) ab1[cl] += dm[cl];
                    for (int j = 0; j < t0; j++) {
                        const float *xr = xpad_row(qk0, NULL, b, t + j, T, P, C);
                        if (!xr) continue;
                        for (int cl = 0; cl < d; cl++)
                            aw1[(size_t)cl * t0 + j] += (double)dm[cl] * xr[c0 + cl];
                    }
                }
                for (int r = P; r < P + T; r++) {
                    float *o = dqk0 + ((size_t)b * T + (r - P)) * C + c0;
                    for (int cl = 0; cl < d; cl++) {
                        const float *wc = w1 + (size_t)(c0 + cl) * t0;
                        double s = 0;
                        for (int j = 0; j < t0; j++) {
                            int t = r - j;
                            if (t >= 0 && t < Tm) s += (double)dmid[(size_t)t * d + cl] * wc[j];
                        }
                        o[cl] = (float)s;
                    }
                }
            }
            for (int cl = 0; cl < d; cl++) {
                int c = c0 + cl;
                db1[c] = (float)((double)db1[c] + ab1[cl]);
                db2[c] = (float)((double)db2[c] + ab2[cl]);
                for (int j = 0; j < t0; j++)
                    dw1[(size_t)c * t0 + j] =
                        (float)((double)dw1[(size_t)c * t0 + j] + aw1[(size_t)cl * t0 + j]);
                for (int i = 0; i < d; i++)
                    for (int j = 0; j < t1; j++) {
                        float *o = dw2 + ((size_t)c * d + i) * t1 + j;
                        *o = (float)((double)*o + aw2[((size_t)j * d + cl) * d + i]);
                    }
            }
        }
        free(dmid);
        free(tw);
        free(aw2);
        free(aw1);
        free(ab1);
        free(ab2);
        /* mean residuals: dqr_i = dq_i + dk_{i/G} / G; dq0_i += dqr_i/2; dk0_{i/G} += dqr_i/2 */
#pragma omp for schedule(static)
        for (int n = 0; n < B * T; n++) {
            const float *gq = dq + (size_t)n * Qd, *gk = dk + (size_t)n * Kd;
            float *d0q = dqk0 + (size_t)n * C, *d0k = d0q + Qd;
            for (int j = 0; j < Hk; j++) {
                for (int e = 0; e < d; e++) {
                    double gkj = (double)gk[(size_t)j * d + e] / G, sum = 0;
                    for (int gi = 0; gi < G; gi++) {
                        int i = j * G + gi;
                        double gr = (double)gq[(size_t)i * d + e] + gkj;
                        d0q[(size_t)i * d + e] = (float)((double)d0q[(size_t)i * d + e] + 0.5 * gr);
                        sum += gr;
                    }
                    d0k[(size_t)j * d + e] = (float)((double)d0k[(size_t)j * d + e] + 0.5 * sum);
                }
            }
        }
    }
    free(wt);
}

/* v[N, 2*half] = [vcur[t] | vdel[t-1]] from vv[N, 2*half] = [vcur | vdel], vdel[-1] = prev[b]
 * (or 0). */
void cpu_value_delay_fwd(int nt, float *v, const float *vv, const float *prev, int B, int T,
                         int half) {
    const size_t row = (size_t)2 * half;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)B * T * half >= CPU_PAR_MIN)
    for (int n = 0; n < B * T; n++) {
        int b = n / T, t = n % T;
        float *vr = v + (size_t)n * row;
        memcpy(vr, vv + (size_t)n * row, (size_t)half * sizeof(float));
        if (t > 0)
            memcpy(vr + half, vv + (size_t)(n - 1) * row + half, (size_t)half * sizeof(float));
        else if (prev)
            memcpy(vr + half, prev + (size_t)b * half, (size_t)half * sizeof(float));
        else
            memset(vr + half, 0, (size_t)half * sizeof(float));
    }
}

/* dvv[t] = [dv[t, :half] | dv[t+1, half:]] (0 for the last step). Overwrites dvv. */
void cpu_value_delay_bwd(int nt, float *dvv, const float *dv, int B, int T, int half) {
    const size_t row = (size_t)2 * half;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)B * T * half >= CPU_PAR_MIN)
    for (int n = 0; n < B * T; n++) {
        int t = n % T;
        const float *g = dv + (size_t)n * row;
        float *o = dvv + (size_t)n * row;
        memcpy(o, g, (size_t)half * sizeof(float));
        if (t + 1 < T)
            memcpy(o + half, g + row + half, (size_t)half * sizeof(float));
        else
            memset(o + half, 0, (size_t)half * sizeof(float));
    }
}
